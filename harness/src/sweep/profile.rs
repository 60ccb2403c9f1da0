//! The sweep's latency profile: a heavy tail on every `box-N->routing` link, built from seeded, non-overlapping latency windows (Toxiproxy's latency toxic has a level and a uniform jitter, no tail).
//!
//! The target is a request-latency distribution given by percentiles
//! (p50, p99, p99.9, max). Windows are placed so that the share of link time
//! in which a request sees at least a level matches the tail's probability:
//! 0.9 % of the time between p99 and p99.9, 0.1 % between p99.9 and max. A
//! request entering a window of latency L is delayed by L only while at
//! least L of the window is left (a removed toxic flushes what it held), so
//! every window lasts 2 L and only its first half counts towards the share.
//! The p50 level is a base window filling the gaps between spikes when the
//! proxy can express it (at least 1 real ms at the scenario's scale); below
//! that, the link's own round trip stands for it and the sweep says so.
//! What renewals actually saw is measured from the history, never taken from
//! here.

use chaos_nemesis::{Fault, FaultKind, Rng, Stream};
use std::collections::BTreeMap;

/// The target distribution, scenario ms.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Profile {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// Share of link time at or above p99 but under p99.9, and at or above p99.9.
const TIER_P99_SHARE: f64 = 0.009;
const TIER_P999_SHARE: f64 = 0.001;
/// Kept clear around every window (scenario ms): the nemesis applies a link's
/// operations in order, so this is only room for its lag.
const GAP_MS: i64 = 500;
/// Placement attempts per spike before it is dropped (and counted).
const TRIES: usize = 200;

/// What was generated, for the sweep's JSON and its notes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Generated {
    #[serde(skip)]
    pub faults: Vec<Fault>,
    /// Spike windows placed, per tier (p99..p99.9, p99.9..max).
    pub spikes_p99: usize,
    pub spikes_p999: usize,
    /// Spikes that found no free room (the window is crowded).
    pub dropped: usize,
    /// Whether the p50 level was applied as base windows.
    pub base_applied: bool,
    pub base_windows: usize,
    pub note: String,
}

fn overlaps(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < b.1 + GAP_MS && b.0 < a.1 + GAP_MS
}

/// A level drawn log-uniformly between `lo` and `hi` (a tail thins as it rises).
fn log_uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    let (lo, hi) = (lo.max(1.0), hi.max(lo.max(1.0)));
    (lo.ln() + rng.unit() * (hi.ln() - lo.ln())).exp()
}

/// Seeded windows for `links` over `[from_ms, to_ms)` (scenario ms), never
/// overlapping each other or the `busy` intervals already on a link.
/// `real_ms_per_s` is the scenario's scale (to decide whether p50 is expressible).
pub fn generate(
    profile: &Profile,
    seed: u64,
    links: &[String],
    from_ms: i64,
    to_ms: i64,
    busy: &BTreeMap<String, Vec<(i64, i64)>>,
    real_ms_per_s: f64,
) -> Generated {
    let mut out = Generated::default();
    let span_ms = (to_ms - from_ms).max(0) as f64;
    let base_real_ms = profile.p50_ms * real_ms_per_s / 1000.0;
    out.base_applied = base_real_ms >= 1.0;
    out.note = if out.base_applied {
        format!(
            "p50 {:.0} ms applied as base windows ({base_real_ms:.1} real ms)",
            profile.p50_ms
        )
    } else {
        format!(
            "p50 {:.0} ms is {base_real_ms:.2} real ms at {real_ms_per_s} real ms per scenario second, under the proxy's 1 ms step: the links' own round trip stands for it (measured below)",
            profile.p50_ms
        )
    };
    for (li, link) in links.iter().enumerate() {
        let mut rng = Rng::new(seed ^ 0x5eed_1a7e_u64.wrapping_mul(li as u64 + 1));
        let mut taken: Vec<(i64, i64)> = busy.get(link).cloned().unwrap_or_default();
        let mut windows: Vec<(i64, i64, i64)> = Vec::new(); // (start, end, latency)
        for (lo, hi, share, tier) in [
            (profile.p99_ms, profile.p999_ms, TIER_P99_SHARE, 0),
            (profile.p999_ms, profile.max_ms, TIER_P999_SHARE, 1),
        ] {
            let target_ms = share * span_ms;
            let mut counted_ms = 0.0;
            while counted_ms < target_ms {
                let level = log_uniform(&mut rng, lo, hi);
                // The last spike goes in with the probability of the share it still owes,
                // so short runs carry the right tail in expectation, not a rounded-up one.
                if counted_ms + level > target_ms && rng.unit() > (target_ms - counted_ms) / level {
                    break;
                }
                counted_ms += level;
                let len = (2.0 * level).round() as i64;
                if len as f64 >= span_ms {
                    out.dropped += 1;
                    continue;
                }
                let mut placed = false;
                for _ in 0..TRIES {
                    let at = from_ms + (rng.unit() * (span_ms - len as f64)) as i64;
                    let w = (at, at + len);
                    if taken.iter().all(|t| !overlaps(*t, w)) {
                        taken.push(w);
                        windows.push((w.0, w.1, level.round() as i64));
                        placed = true;
                        break;
                    }
                }
                match (placed, tier) {
                    (false, _) => out.dropped += 1,
                    (true, 0) => out.spikes_p99 += 1,
                    (true, _) => out.spikes_p999 += 1,
                }
            }
        }
        windows.sort();
        let mut link_faults: Vec<(i64, Fault)> = windows
            .iter()
            .map(|&(a, b, level)| {
                (
                    a,
                    latency(link, a, b, level, 0, "sweep: latency spike (the tail)"),
                )
            })
            .collect();
        if out.base_applied {
            // The base level fills every free gap, so a link never holds two toxics at once.
            taken.sort();
            let mut cursor = from_ms;
            let mut gaps = Vec::new();
            for &(a, b) in &taken {
                if a - GAP_MS > cursor + GAP_MS {
                    gaps.push((cursor + GAP_MS, a - GAP_MS));
                }
                cursor = cursor.max(b);
            }
            if to_ms - GAP_MS > cursor + GAP_MS {
                gaps.push((cursor + GAP_MS, to_ms - GAP_MS));
            }
            let p50 = profile.p50_ms.round() as i64;
            for (a, b) in gaps {
                if b - a >= 2 * GAP_MS {
                    link_faults.push((
                        a,
                        latency(link, a, b, p50, p50 / 3, "sweep: base latency (p50)"),
                    ));
                    out.base_windows += 1;
                }
            }
        }
        link_faults.sort_by_key(|(a, _)| *a);
        out.faults.extend(link_faults.into_iter().map(|(_, f)| f));
    }
    out
}

fn latency(link: &str, a: i64, b: i64, level_ms: i64, jitter_ms: i64, note: &str) -> Fault {
    let kind = FaultKind::Latency {
        link: link.to_string(),
        latency_ms: level_ms,
        jitter_ms,
        // The request is late: the routing db sees the renewal late, as a lease judges it.
        stream: Stream::Upstream,
    };
    Fault::at(a, Some(b - a), kind).with_note(note)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile {
            p50_ms: 30.0,
            p99_ms: 300.0,
            p999_ms: 2100.0,
            max_ms: 4200.0,
        }
    }

    fn windows(g: &Generated, link: &str) -> Vec<(i64, i64, i64)> {
        g.faults
            .iter()
            .filter_map(|f| match &f.kind {
                FaultKind::Latency {
                    link: l,
                    latency_ms,
                    ..
                } if l == link => Some((f.at_ms, f.at_ms + f.duration_ms.unwrap(), *latency_ms)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn windows_never_overlap_and_avoid_busy_time() {
        let links: Vec<String> = (1..=4).map(|i| format!("box-{i}->routing")).collect();
        let start = 12 * 3_600_000;
        let mut busy = BTreeMap::new();
        busy.insert(links[0].clone(), vec![(start, start + 5_000)]);
        let g = generate(&profile(), 7, &links, start, start + 2_400_000, &busy, 10.0);
        assert!(!g.base_applied, "30 ms is 0.3 real ms: not expressible");
        for link in &links {
            let mut w = windows(&g, link);
            w.sort();
            assert!(!w.is_empty(), "{link} has no spikes");
            for pair in w.windows(2) {
                assert!(pair[0].1 + GAP_MS <= pair[1].0, "{link}: {pair:?} overlap");
            }
            if link == &links[0] {
                assert!(w.iter().all(|x| x.0 >= start + 5_000 + GAP_MS), "{w:?}");
            }
            for x in &w {
                assert!((300..=4200).contains(&x.2), "{x:?}: level outside p99..max");
                assert!(
                    (x.1 - x.0 - 2 * x.2).abs() <= 1,
                    "{x:?}: a window lasts twice its level"
                );
            }
        }
        // 0.1 % of 2,400 s is 2.4 s of p99.9-and-above per link, in expectation.
        assert!(
            g.spikes_p999 >= 1 && g.spikes_p999 <= 12,
            "{}",
            g.spikes_p999
        );
        assert!(g.spikes_p99 >= 40, "{}", g.spikes_p99);
        // Same seed, same weather; another seed, another.
        let again = generate(&profile(), 7, &links, start, start + 2_400_000, &busy, 10.0);
        assert_eq!(windows(&g, &links[2]), windows(&again, &links[2]));
        let other = generate(&profile(), 8, &links, start, start + 2_400_000, &busy, 10.0);
        assert_ne!(windows(&g, &links[2]), windows(&other, &links[2]));
    }

    #[test]
    fn base_fills_the_gaps_when_expressible() {
        let links = vec!["box-1->routing".to_string()];
        let start = 12 * 3_600_000;
        // 1,000 real ms per scenario second: 30 ms is 30 real ms.
        let g = generate(
            &profile(),
            1,
            &links,
            start,
            start + 600_000,
            &BTreeMap::new(),
            1000.0,
        );
        assert!(g.base_applied && g.base_windows >= 1);
        let mut w = windows(&g, &links[0]);
        w.sort();
        for pair in w.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{pair:?} overlap");
        }
        assert!(w.iter().any(|x| x.2 == 30));
    }
}

/// The stretches `[from, to)` in scenario ms that a scenario's own link faults hold each
/// link: a sweep's latency profile keeps clear of them (a second toxic on a link would
/// collide, and a heal removes every toxic on it).
pub fn busy_links(scenario: &crate::scenario::Scenario) -> BTreeMap<String, Vec<(i64, i64)>> {
    let mut open: BTreeMap<(usize, String), i64> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for op in scenario
        .schedule
        .ops
        .iter()
        .filter(|o| o.kind.is_link_fault())
    {
        for link in &op.links {
            if op.heal {
                if let Some(from) = open.remove(&(op.fault, link.clone())) {
                    out.entry(link.clone()).or_default().push((from, op.at_ms));
                }
            } else {
                open.insert((op.fault, link.clone()), op.at_ms);
            }
        }
    }
    for ((_, link), from) in open {
        out.entry(link).or_default().push((from, scenario.end_ms));
    }
    out
}
