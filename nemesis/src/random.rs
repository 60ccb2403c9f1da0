//! Generated schedules for nightly runs: a seeded random mix of faults, the same seed giving the same schedule.

use crate::{Fault, FaultKind, Stream, Topology};
use serde::{Deserialize, Serialize};

/// splitmix64: tiny, fast, and the same on every platform forever, which
/// is what a stored seed needs (a crate upgrade must not change schedules).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next_u64() % ((hi - lo) as u64 + 1)) as i64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as i64 - 1) as usize]
    }
}

/// How many targets one generated fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TargetSpread {
    #[default]
    One,
    /// Fewer than half.
    Minority,
    All,
    /// Any of the above, drawn per fault.
    Mixed,
}

/// What a nightly run may throw, all in scenario ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomProfile {
    /// Fault kinds to draw from: pause, kill, stop, crash, latency, bandwidth, down, timeout, reset_peer.
    pub faults: Vec<String>,
    #[serde(default)]
    pub targets: TargetSpread,
    /// Gap between faults.
    pub interval_ms: [i64; 2],
    /// How long each lasts.
    pub duration_ms: [i64; 2],
    #[serde(default = "default_latency")]
    pub latency_ms: [i64; 2],
    /// The least a stop, crash or kill lasts. A database takes its own time to start again
    /// (about 100 real ms after a crash here), a mover to start and connect (tens of ms), and
    /// a window shorter than that cannot end on time.
    /// Unset: the caller's floor (`generate`'s `restart_floor_ms`: 300 real ms in scenario ms).
    #[serde(default)]
    pub restart_min_ms: Option<i64>,
}

fn default_latency() -> [i64; 2] {
    [100, 5_000]
}

pub const RANDOM_FAULT_KINDS: &[&str] = &[
    "pause",
    "kill",
    "stop",
    "crash",
    "latency",
    "bandwidth",
    "down",
    "timeout",
    "reset_peer",
];

/// Draw faults from `profile` between `start_ms` and `end_ms`. Every fault
/// has a duration and ends before `end_ms`, so each is healed in the run.
/// `restart_floor_ms`: the least a stop or crash lasts when the profile does not say.
pub fn generate(
    seed: u64,
    profile: &RandomProfile,
    topology: &Topology,
    start_ms: i64,
    end_ms: i64,
    restart_floor_ms: i64,
) -> Result<Vec<Fault>, String> {
    for k in &profile.faults {
        if !RANDOM_FAULT_KINDS.contains(&k.as_str()) {
            return Err(format!(
                "unknown fault kind '{k}' in nemesis.random.faults (known: {})",
                RANDOM_FAULT_KINDS.join(", ")
            ));
        }
    }
    if profile.faults.is_empty() {
        return Ok(vec![]);
    }
    for (name, [lo, hi]) in [
        ("interval_ms", profile.interval_ms),
        ("duration_ms", profile.duration_ms),
        ("latency_ms", profile.latency_ms),
    ] {
        if lo < 0 || hi < lo {
            return Err(format!("nemesis.random.{name} must be [low, high] with 0 <= low <= high (got [{lo}, {hi}])"));
        }
    }
    if profile.restart_min_ms.is_some_and(|m| m < 0) {
        return Err("nemesis.random.restart_min_ms must be 0 or more".into());
    }
    let restart_min = profile.restart_min_ms.unwrap_or(restart_floor_ms).max(0);
    if profile.interval_ms[1] == 0 {
        return Err("nemesis.random.interval_ms must allow a gap above 0".into());
    }
    let mut rng = Rng::new(seed);
    let mut faults = Vec::new();
    let mut t = start_ms + rng.range(profile.interval_ms[0], profile.interval_ms[1]);
    // A limit on everything: at most 10,000 generated faults.
    while t < end_ms && faults.len() < 10_000 {
        let drawn = rng.range(profile.duration_ms[0], profile.duration_ms[1]);
        let kind = rng.pick(&profile.faults).clone();
        let drawn = if matches!(kind.as_str(), "stop" | "crash" | "kill") {
            drawn.max(restart_min)
        } else {
            drawn
        };
        let duration = drawn.min(end_ms - t);
        let spread = match profile.targets {
            TargetSpread::Mixed => {
                *rng.pick(&[TargetSpread::One, TargetSpread::Minority, TargetSpread::All])
            }
            s => s,
        };
        let pool: Vec<String> = match kind.as_str() {
            "pause" | "kill" => topology.boxes.clone(),
            "stop" | "crash" => topology.nodes.clone(),
            _ => topology.links(),
        };
        for target in choose(&mut rng, &pool, spread) {
            let latency = rng.range(profile.latency_ms[0], profile.latency_ms[1]);
            let fk = match kind.as_str() {
                "pause" => FaultKind::Pause {
                    target,
                    freezer: false,
                },
                "kill" => FaultKind::Kill { target },
                "stop" => FaultKind::Stop { target },
                "crash" => FaultKind::Crash { target },
                "latency" => FaultKind::Latency {
                    link: target,
                    latency_ms: latency,
                    jitter_ms: latency / 4,
                    stream: Stream::Downstream,
                },
                "bandwidth" => FaultKind::Bandwidth {
                    link: target,
                    rate_kb: rng.range(16, 1024),
                    stream: Stream::Downstream,
                },
                "down" => FaultKind::Down { link: target },
                "timeout" => FaultKind::Timeout {
                    link: target,
                    timeout_ms: 0,
                    stream: Stream::Downstream,
                },
                _ => FaultKind::ResetPeer {
                    link: target,
                    timeout_ms: 0,
                    stream: Stream::Downstream,
                },
            };
            faults.push(Fault {
                at_ms: t,
                duration_ms: Some(duration),
                kind: fk,
                note: Some(format!("generated from seed {seed}")),
            });
        }
        t += duration
            + rng
                .range(profile.interval_ms[0], profile.interval_ms[1])
                .max(1);
    }
    Ok(faults)
}

fn choose(rng: &mut Rng, pool: &[String], spread: TargetSpread) -> Vec<String> {
    let n = match spread {
        TargetSpread::One | TargetSpread::Mixed => 1,
        TargetSpread::Minority => rng.range(1, ((pool.len() as i64 - 1) / 2).max(1)) as usize,
        TargetSpread::All => pool.len(),
    };
    let mut rest: Vec<String> = pool.to_vec();
    let mut out = Vec::new();
    while out.len() < n && !rest.is_empty() {
        let i = rng.range(0, rest.len() as i64 - 1) as usize;
        out.push(rest.swap_remove(i));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> RandomProfile {
        RandomProfile {
            faults: vec!["pause".into(), "latency".into(), "stop".into()],
            targets: TargetSpread::Mixed,
            interval_ms: [10_000, 60_000],
            duration_ms: [5_000, 30_000],
            latency_ms: [100, 2_000],
            restart_min_ms: None,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let t = Topology::new(4, 3);
        let a = generate(7, &profile(), &t, 0, 3_600_000, 0).unwrap();
        let b = generate(7, &profile(), &t, 0, 3_600_000, 0).unwrap();
        let c = generate(8, &profile(), &t, 0, 3_600_000, 0).unwrap();
        assert!(!a.is_empty());
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_generated_fault_heals_inside_the_window() {
        let t = Topology::new(4, 3);
        for seed in 0..50 {
            for f in generate(seed, &profile(), &t, 1_000, 600_000, 20_000).unwrap() {
                assert!(
                    f.at_ms >= 1_000 && f.at_ms + f.duration_ms.unwrap() <= 600_000,
                    "{f:?}"
                );
            }
        }
    }

    #[test]
    fn a_database_stop_lasts_at_least_the_restart_floor() {
        let t = Topology::new(4, 3);
        let mut stops = 0;
        for seed in 0..50 {
            for f in generate(seed, &profile(), &t, 0, 3_600_000, 20_000).unwrap() {
                // Only the run's end may cut one short (every fault heals inside the window).
                if matches!(f.kind, FaultKind::Stop { .. }) && f.at_ms + 20_000 <= 3_600_000 {
                    stops += 1;
                    assert!(f.duration_ms.unwrap() >= 20_000, "{f:?}");
                }
            }
        }
        assert!(stops > 0, "the profile draws stops");
        let mut p = profile();
        p.restart_min_ms = Some(25_000);
        for f in generate(3, &p, &t, 0, 3_600_000, 20_000).unwrap() {
            if matches!(f.kind, FaultKind::Stop { .. }) && f.at_ms + 25_000 <= 3_600_000 {
                assert!(f.duration_ms.unwrap() >= 25_000, "{f:?}");
            }
        }
    }

    #[test]
    fn an_unknown_kind_is_refused() {
        let mut p = profile();
        p.faults.push("meteor".into());
        assert!(generate(1, &p, &Topology::new(4, 3), 0, 10, 0)
            .unwrap_err()
            .contains("meteor"));
    }
}
