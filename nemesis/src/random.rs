//! Generated schedules for nightly runs: a seeded random mix of faults, the same seed giving the same schedule.

use crate::{Fault, FaultKind, ScenarioMs, Stream, Topology};
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
    /// Fault kinds to draw from: pause, kill, stop, crash, latency, bandwidth, down, timeout,
    /// reset_peer, cpu (a box or node starved to 2-25% of a CPU), stall (a node's commits).
    pub faults: Vec<String>,
    #[serde(default)]
    pub targets: TargetSpread,
    /// Gap between faults.
    pub interval_ms: [ScenarioMs; 2],
    /// How long each lasts.
    pub duration_ms: [ScenarioMs; 2],
    #[serde(default = "default_latency")]
    pub latency_ms: [ScenarioMs; 2],
    /// The least a stop, crash or kill lasts. A database takes its own time to start again
    /// (about 100 real ms after a crash here), a mover to start and connect (tens of ms), and
    /// a window shorter than that cannot end on time.
    /// Unset: the caller's floor (`generate`'s `restart_floor_ms`: 300 real ms in scenario ms).
    #[serde(default)]
    pub restart_min_ms: Option<ScenarioMs>,
    /// Faults on whoever holds the claim at one of its shard writes (a triggered fault each):
    /// a pause, kill or starved CPU (as `faults` allows; a pause if it allows none) at its n-th write,
    /// n drawn from `holder_write`, inside the write's transaction or right after its commit.
    #[serde(default)]
    pub holder_faults: u32,
    #[serde(default = "default_holder_write")]
    pub holder_write: [u32; 2],
    /// Link faults on a role, each right after a grant (its n-th, n drawn from `role_grant`):
    /// `down` cuts the new holder's routing link (its renewals fail while it works), `latency`
    /// slows the previous holder's shard links (its last writes land late), as `faults` allows
    /// (a cut if it allows neither).
    #[serde(default)]
    pub role_faults: u32,
    #[serde(default = "default_role_grant")]
    pub role_grant: [u32; 2],
}

fn default_role_grant() -> [u32; 2] {
    [1, 3]
}

fn default_holder_write() -> [u32; 2] {
    [1, 20]
}

fn default_latency() -> [i64; 2] {
    [100, 5_000]
}

/// The kinds `[nemesis.random] faults` may draw: every kind of [`crate::VERB_PAIRS`] but the
/// clock (an offset needs a size the profile does not give).
pub fn random_fault_kinds() -> impl Iterator<Item = &'static str> {
    crate::VERB_PAIRS
        .iter()
        .map(|(open, _)| *open)
        .filter(|k| *k != "clock")
}

/// Draw faults from `profile` between `start_ms` and `end_ms`. Every fault
/// has a duration and ends before `end_ms`, so each is healed in the run.
/// `restart_floor_ms`: the least a stop or crash lasts when the profile does not say.
/// `lease_ms`: the scenario's lease; the triggered faults (on the holder and on roles) last
/// from half a lease to three, so some end before a takeover and some after (0: they draw from
/// `duration_ms` instead).
pub fn generate(
    seed: u64,
    profile: &RandomProfile,
    topology: &Topology,
    start_ms: i64,
    end_ms: i64,
    restart_floor_ms: i64,
    lease_ms: i64,
) -> Result<Vec<Fault>, String> {
    for k in &profile.faults {
        if !random_fault_kinds().any(|r| r == k) {
            return Err(format!(
                "unknown fault kind '{k}' in nemesis.random.faults (known: {})",
                random_fault_kinds().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let restart_min_early = profile.restart_min_ms.unwrap_or(restart_floor_ms).max(0);
    let triggered = |restart_min: i64| -> Result<Vec<Fault>, String> {
        let around = if lease_ms > 0 {
            [lease_ms / 2, lease_ms * 3]
        } else {
            profile.duration_ms
        };
        let mut out = holder_faults(seed, profile, start_ms, restart_min, around)?;
        out.extend(role_faults(seed, profile, start_ms, around)?);
        Ok(out)
    };
    if profile.faults.is_empty() {
        return triggered(restart_min_early);
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
            // A lock service's members are not Postgres: no stall, no cpu there.
            "stall" => topology.postgres_nodes(),
            "cpu" => topology
                .boxes
                .iter()
                .cloned()
                .chain(topology.postgres_nodes())
                .collect(),
            _ => topology.links(),
        };
        for target in choose(&mut rng, &pool, spread) {
            let latency = rng.range(profile.latency_ms[0], profile.latency_ms[1]);
            let fk = drawn_kind(
                &kind,
                target,
                latency,
                &mut rng,
                &topology.asynchronous_commit,
            );
            faults.push(
                Fault::at(t, Some(duration), fk).with_note(format!("generated from seed {seed}")),
            );
        }
        t += duration
            + rng
                .range(profile.interval_ms[0], profile.interval_ms[1])
                .max(1);
    }
    faults.extend(triggered(restart_min)?);
    Ok(faults)
}

/// A drawn fault of `kind` on `target` (a link for the link kinds), `latency` drawn already; a
/// crash of a node in `unsynced` (asynchronous commit) loses what it had not written.
fn drawn_kind(
    kind: &str,
    target: String,
    latency: i64,
    rng: &mut Rng,
    unsynced: &[String],
) -> FaultKind {
    match kind {
        "pause" => FaultKind::Pause {
            target,
            freezer: false,
        },
        "kill" => FaultKind::Kill { target },
        "stop" => FaultKind::Stop { target },
        "crash" => FaultKind::Crash {
            lose_unsynced: unsynced.contains(&target),
            target,
        },
        "cpu" => FaultKind::Cpu {
            target,
            share: starved_share(rng),
        },
        "stall" => FaultKind::Stall { target },
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
        // reset_peer, and a kind this match has not learned (a test says so).
        _ => FaultKind::ResetPeer {
            link: target,
            timeout_ms: 0,
            stream: Stream::Downstream,
        },
    }
}

/// A starved CPU's share: 2% to 25% of one CPU, in whole percents.
fn starved_share(rng: &mut Rng) -> f64 {
    rng.range(2, 25) as f64 / 100.0
}

/// The profile's faults on the holder, from a generator of their own (a seed's clock-timed
/// schedule stays what it was without them).
fn holder_faults(
    seed: u64,
    profile: &RandomProfile,
    start_ms: i64,
    restart_min: i64,
    duration_ms: [i64; 2],
) -> Result<Vec<Fault>, String> {
    let [lo, hi] = profile.holder_write;
    if profile.holder_faults > 0 && (lo == 0 || hi < lo) {
        return Err(format!(
            "nemesis.random.holder_write must be [low, high] with 1 <= low <= high (got [{lo}, {hi}])"
        ));
    }
    let mut rng = Rng::new(seed ^ 0x686f_6c64_6572);
    let kinds: Vec<&str> = ["pause", "kill", "cpu"]
        .into_iter()
        .filter(|k| profile.faults.iter().any(|f| f == k))
        .collect();
    let mut out = Vec::new();
    // Inside and between take turns from a seeded first, so two faults ask both questions.
    let first_inside = rng.unit() < 0.5;
    let mut taken = Vec::new();
    for k in 0..profile.holder_faults {
        let kind = if kinds.is_empty() {
            "pause"
        } else {
            *rng.pick(&kinds)
        };
        // Distinct writes while there are enough: two faults on one write would land on the
        // same box at once, and the shorter's heal would end the longer.
        let mut nth = rng.range(lo as i64, hi as i64) as u32;
        for _ in 0..64 {
            if !taken.contains(&nth) {
                break;
            }
            nth = rng.range(lo as i64, hi as i64) as u32;
        }
        taken.push(nth);
        let inside = if (k % 2 == 0) == first_inside {
            crate::Inside::Transaction
        } else {
            crate::Inside::Between
        };
        let mut duration = rng.range(duration_ms[0], duration_ms[1]);
        let target = "holder".to_string();
        let fk = if kind == "kill" {
            duration = duration.max(restart_min);
            FaultKind::Kill { target }
        } else if kind == "cpu" {
            FaultKind::Cpu {
                target,
                share: starved_share(&mut rng),
            }
        } else {
            FaultKind::Pause {
                target,
                freezer: false,
            }
        };
        let mut f = Fault::at(start_ms, Some(duration), fk).with_note(format!(
            "generated from seed {seed}: the holder at its write {nth}"
        ));
        f.when = Some(crate::Trigger {
            on: crate::Event::Write,
            by: crate::Who::Holder,
            nth,
            inside: Some(inside),
            delay_s: 0.0,
            shard: None,
        });
        // A drawn moment the run never reaches is told in the story, not a reason for unknown.
        f.optional = true;
        out.push(f);
    }
    Ok(out)
}

/// The profile's link faults on roles, after grants, from a generator of their own.
fn role_faults(
    seed: u64,
    profile: &RandomProfile,
    start_ms: i64,
    duration_ms: [i64; 2],
) -> Result<Vec<Fault>, String> {
    let [lo, hi] = profile.role_grant;
    if profile.role_faults > 0 && (lo == 0 || hi < lo) {
        return Err(format!(
            "nemesis.random.role_grant must be [low, high] with 1 <= low <= high (got [{lo}, {hi}])"
        ));
    }
    let mut rng = Rng::new(seed ^ 0x726f_6c65);
    let kinds: Vec<&str> = ["down", "latency"]
        .into_iter()
        .filter(|k| profile.faults.iter().any(|f| f == k))
        .collect();
    let mut out = Vec::new();
    for _ in 0..profile.role_faults {
        let kind = if kinds.is_empty() {
            "down"
        } else {
            *rng.pick(&kinds)
        };
        let duration = rng.range(duration_ms[0], duration_ms[1]);
        let (fk, nth, what) = if kind == "latency" {
            // Somebody held it before only from the second grant on.
            let nth = rng.range(lo.max(2) as i64, hi.max(2) as i64) as u32;
            let latency = rng.range(duration_ms[0] / 2, duration_ms[1] / 2);
            let fk = FaultKind::Latency {
                link: "previous-holder->shard*".into(),
                latency_ms: latency,
                jitter_ms: latency / 4,
                stream: Stream::Downstream,
            };
            (fk, nth, "slows the previous holder's shard links")
        } else {
            let nth = rng.range(lo as i64, hi as i64) as u32;
            let fk = FaultKind::Down {
                link: "holder->routing".into(),
            };
            (fk, nth, "cuts the new holder's routing link")
        };
        let mut f = Fault::at(start_ms, Some(duration), fk)
            .with_note(format!("generated from seed {seed}: grant {nth} {what}"));
        f.when = Some(crate::Trigger {
            on: crate::Event::Grant,
            by: crate::Who::Any,
            nth,
            inside: None,
            delay_s: 0.0,
            shard: None,
        });
        f.optional = true;
        out.push(f);
    }
    Ok(out)
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

    /// A kind added to `VERB_PAIRS` is one a random schedule may draw: it must draw that kind,
    /// not fall through to another (the adding-a-kind experiment's throwaway became reset_peer).
    #[test]
    fn every_kind_a_schedule_may_draw_is_drawn_as_itself() {
        for kind in random_fault_kinds() {
            let drawn = drawn_kind(kind, "box-1".into(), 100, &mut Rng::new(1), &[]);
            assert_eq!(drawn.verb(), kind, "{drawn:?}");
        }
    }

    fn profile() -> RandomProfile {
        RandomProfile {
            faults: vec!["pause".into(), "latency".into(), "stop".into()],
            targets: TargetSpread::Mixed,
            interval_ms: [10_000, 60_000],
            duration_ms: [5_000, 30_000],
            latency_ms: [100, 2_000],
            restart_min_ms: None,
            holder_faults: 0,
            holder_write: default_holder_write(),
            role_faults: 0,
            role_grant: default_role_grant(),
        }
    }

    /// A drawn crash of a node that runs asynchronous commit loses what it had not written, and
    /// says so (the schedule refuses it otherwise); any other node's crash loses nothing.
    #[test]
    fn a_drawn_crash_of_an_asynchronous_node_loses_unsynced_commits() {
        let mut t = Topology::new(4, 3);
        t.asynchronous_commit = vec!["routing".into()];
        let mut p = profile();
        p.faults = vec!["crash".into()];
        p.targets = TargetSpread::All;
        let all = generate(3, &p, &t, 0, 3_600_000, 0, 0).unwrap();
        assert!(!all.is_empty());
        for f in &all {
            match &f.kind {
                FaultKind::Crash {
                    target,
                    lose_unsynced,
                } => assert_eq!(*lose_unsynced, target == "routing", "{target}"),
                k => panic!("{k:?}"),
            }
        }
        assert!(crate::expand(&all, &t, 0, 3_600_000, |ms| ms.to_string()).is_ok());
    }

    #[test]
    fn holder_faults_are_triggers_of_their_own_drawing() {
        let t = Topology::new(4, 3);
        let plain = generate(7, &profile(), &t, 0, 3_600_000, 0, 0).unwrap();
        let mut p = profile();
        p.holder_faults = 3;
        p.holder_write = [2, 9];
        let with = generate(7, &p, &t, 0, 3_600_000, 0, 0).unwrap();
        assert_eq!(
            &with[..plain.len()],
            &plain[..],
            "the timed schedule is unchanged"
        );
        let holder = &with[plain.len()..];
        assert_eq!(holder.len(), 3);
        let w: Vec<&crate::Trigger> = holder.iter().map(|f| f.when.as_ref().unwrap()).collect();
        assert!(w[0].nth != w[1].nth && w[1].nth != w[2].nth && w[0].nth != w[2].nth);
        assert!(
            w[0].inside != w[1].inside && w[1].inside != w[2].inside,
            "{w:?}"
        );
        for f in holder {
            let w = f.when.as_ref().expect("a trigger");
            assert_eq!((w.on, &w.by), (crate::Event::Write, &crate::Who::Holder));
            assert!((2..=9).contains(&w.nth), "{w:?}");
            assert!(w.inside.is_some());
            assert_eq!(f.kind.target(), "holder");
        }
        assert_eq!(with, generate(7, &p, &t, 0, 3_600_000, 0, 0).unwrap());
        p.holder_write = [0, 3];
        assert!(generate(7, &p, &t, 0, 3_600_000, 0, 0)
            .unwrap_err()
            .contains("holder_write"));
    }

    #[test]
    fn role_faults_follow_grants_and_last_around_the_lease() {
        let t = Topology::new(4, 3);
        let mut p = profile();
        p.faults = vec!["down".into(), "latency".into()];
        p.interval_ms = [4_000_000, 4_000_000];
        p.holder_faults = 2;
        p.role_faults = 12;
        let lease = 10_000;
        let all = generate(5, &p, &t, 0, 3_600_000, 0, lease).unwrap();
        assert_eq!(all.len(), 14, "the window holds no timed fault: {all:?}");
        for f in &all {
            let d = f.duration_ms.unwrap();
            assert!((lease / 2..=lease * 3).contains(&d), "{d} around {lease}");
            assert!(f.optional, "a drawn moment may never come");
        }
        let mut kinds = std::collections::BTreeSet::new();
        for f in &all[2..] {
            let w = f.when.as_ref().unwrap();
            assert_eq!((w.on, &w.by), (crate::Event::Grant, &crate::Who::Any));
            match &f.kind {
                FaultKind::Down { link } => assert_eq!(link, "holder->routing"),
                FaultKind::Latency { link, .. } => {
                    assert_eq!(link, "previous-holder->shard*");
                    assert!(w.nth >= 2, "a previous holder exists from the 2nd grant");
                }
                k => panic!("{k:?}"),
            }
            assert!((1..=3).contains(&w.nth));
            kinds.insert(f.kind.verb());
        }
        assert_eq!(kinds.len(), 2, "both kinds drawn over 12: {kinds:?}");
        let sched = crate::expand(&all, &t, 0, 3_600_000, |ms| ms.to_string()).unwrap();
        assert_eq!(
            sched.triggered.len(),
            14,
            "every one validates as a triggered fault"
        );
        p.role_grant = [3, 1];
        assert!(generate(5, &p, &t, 0, 3_600_000, 0, lease)
            .unwrap_err()
            .contains("role_grant"));
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let t = Topology::new(4, 3);
        let a = generate(7, &profile(), &t, 0, 3_600_000, 0, 0).unwrap();
        let b = generate(7, &profile(), &t, 0, 3_600_000, 0, 0).unwrap();
        let c = generate(8, &profile(), &t, 0, 3_600_000, 0, 0).unwrap();
        assert!(!a.is_empty());
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_generated_fault_heals_inside_the_window() {
        let t = Topology::new(4, 3);
        for seed in 0..50 {
            for f in generate(seed, &profile(), &t, 1_000, 600_000, 20_000, 0).unwrap() {
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
            for f in generate(seed, &profile(), &t, 0, 3_600_000, 20_000, 0).unwrap() {
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
        for f in generate(3, &p, &t, 0, 3_600_000, 20_000, 0).unwrap() {
            if matches!(f.kind, FaultKind::Stop { .. }) && f.at_ms + 25_000 <= 3_600_000 {
                assert!(f.duration_ms.unwrap() >= 25_000, "{f:?}");
            }
        }
    }

    #[test]
    fn an_unknown_kind_is_refused() {
        let mut p = profile();
        p.faults.push("meteor".into());
        assert!(generate(1, &p, &Topology::new(4, 3), 0, 10, 0, 0)
            .unwrap_err()
            .contains("meteor"));
    }

    #[test]
    fn starved_cpus_and_stalled_commits_are_drawn_and_validate() {
        let t = Topology::new(4, 3);
        let mut p = profile();
        p.faults = vec!["cpu".into(), "stall".into()];
        p.holder_faults = 4;
        let all = generate(11, &p, &t, 0, 3_600_000, 0, 10_000).unwrap();
        let (mut cpus, mut stalls, mut held) = (0, 0, 0);
        for f in &all {
            match &f.kind {
                FaultKind::Cpu { target, share } => {
                    assert!((0.02..=0.25).contains(share), "{share}");
                    match f.when {
                        Some(_) => {
                            assert_eq!(target, "holder");
                            held += 1;
                        }
                        None => cpus += 1,
                    }
                }
                FaultKind::Stall { target } => {
                    assert!(t.nodes.contains(target), "{target}");
                    stalls += 1;
                }
                k => assert!(matches!(k, FaultKind::Pause { .. }), "{k:?}"),
            }
        }
        assert!(cpus > 0 && stalls > 0 && held > 0, "{cpus} {stalls} {held}");
        crate::expand(&all, &t, 0, 3_600_000, |ms| ms.to_string()).unwrap();
        // Without cpu, the holder's faults draw what they drew before.
        let before = generate(11, &profile(), &t, 0, 3_600_000, 0, 10_000).unwrap();
        assert!(before
            .iter()
            .all(|f| !matches!(f.kind, FaultKind::Cpu { .. })));
    }
}
