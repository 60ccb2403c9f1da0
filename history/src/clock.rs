//! The scenario clock: maps real time (monotonic or wall) onto the scaled scenario time reports print.

use serde::{Deserialize, Serialize};

/// Scenario milliseconds: the scenario's own clock (1 scenario second is `time_scale_ms` real
/// ms). What scenarios, reports, the nemesis and the history's `scenario_time` speak. A field
/// named `*_ms` at a seam between crates says its unit in its type: this, `RealMs` or
/// `ReadingMs` (ARCHITECTURE.md, "Scenario time and real time").
pub type ScenarioMs<T = i64> = T;

/// Real milliseconds: the machine's clock (the mover and watcher protocols' durations, already
/// scaled; the proxy's toxics; measured lateness and latency).
pub type RealMs<T = u64> = T;

/// A reading's own timestamp in the farm's data: Unix ms on the scenario's calendar (a
/// turbine's clock), neither a scenario instant nor a real one.
pub type ReadingMs = i64;

/// Milliseconds in a day, the modulus for printing a scenario time of day.
const DAY_MS: i64 = 86_400_000;

/// Wall-clock drift against the monotonic clock, in parts per million, above which a run says
/// so. A steady machine shows well under 1 ppm over a run; a VM's time sync was seen at 5,000.
pub const WALL_DRIFT_WARN_PPM: i64 = 100;

/// How real time maps to scenario time for one run.
///
/// Scenario time is held as milliseconds since the scenario's midnight
/// (21:40:00 is 78_000_000) so that a run crossing midnight still orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioClock {
    /// Wall clock (Unix ns) at the run's scenario start.
    pub start_unix_ns: i64,
    /// Scenario time of the start, ms since the scenario's midnight.
    pub start_scenario_ms: i64,
    /// Real nanoseconds per scenario second (10 ms = 10_000_000 by default).
    pub real_ns_per_scenario_s: i64,
    /// The scenario's calendar day at midnight, Unix ms: readings carry
    /// timestamps in this calendar (2026-04-13 for April).
    pub scenario_day_unix_ms: i64,
    /// The run's wall clock checked against its monotonic clock at the end: `wall_check_run_ns`
    /// of monotonic time after the start, the wall clock read `wall_check_unix_ns`. The history
    /// is stamped on the monotonic clock and the databases stamp commits on the wall clock, and
    /// a machine's wall clock may be slewed while a run goes (a VM's time sync was seen running
    /// it 0.5% fast: a commit 137 ms real late at the end of an April night). Wall-clock
    /// instants are mapped through the pair, linearly. 0: not checked (runs stored before),
    /// the two clocks taken as one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wall_check_run_ns: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wall_check_unix_ns: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl ScenarioClock {
    /// Scenario ms for a real duration since the run's start (monotonic ns).
    pub fn scenario_ms_at_run_ns(&self, run_ns: i64) -> i64 {
        self.start_scenario_ms + self.scenario_ms_for_real_ns(run_ns)
    }

    /// Scenario ms for a wall-clock instant (for example a commit timestamp).
    pub fn scenario_ms_at_unix_ns(&self, unix_ns: i64) -> i64 {
        self.scenario_ms_at_run_ns(self.run_ns_at_unix_ns(unix_ns))
    }

    /// The clock with its wall clock checked now: `run_ns` of monotonic time since the start,
    /// the wall clock at `unix_ns`.
    pub fn with_wall_check(self, run_ns: i64, unix_ns: i64) -> ScenarioClock {
        ScenarioClock {
            wall_check_run_ns: run_ns,
            wall_check_unix_ns: unix_ns,
            ..self
        }
    }

    /// The clock with its wall clock checked now, for a run whose scenario start was the
    /// monotonic instant `t0`.
    pub fn checked_now(self, t0: std::time::Instant) -> ScenarioClock {
        let run_ns = std::time::Instant::now()
            .saturating_duration_since(t0)
            .as_nanos() as i64;
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        self.with_wall_check(run_ns, unix_ns)
    }

    /// Monotonic and wall-clock spans of the checked part of the run, when there is one.
    fn wall_spans(&self) -> Option<(i128, i128)> {
        let run = self.wall_check_run_ns as i128;
        let wall = self.wall_check_unix_ns as i128 - self.start_unix_ns as i128;
        // A wall clock stepped by more than a tenth is not a slew: take the clocks as one.
        (run > 0 && wall > 0 && wall * 10 > run * 9 && wall * 10 < run * 11).then_some((run, wall))
    }

    /// How far the wall clock ran from the monotonic clock over the checked part of the run,
    /// in parts per million (positive: the wall clock ran fast). None when the run was not
    /// checked, or when the wall clock was stepped rather than slewed.
    pub fn wall_drift_ppm(&self) -> Option<i64> {
        self.wall_spans()
            .map(|(run, wall)| ((wall - run) * 1_000_000 / run) as i64)
    }

    /// One line for the user when the wall clock moved against the monotonic clock by more
    /// than `WALL_DRIFT_WARN_PPM` (a step, or a slew): commit times are then mapped through the
    /// check, and a reader should know the machine's clock was not steady.
    pub fn wall_drift_warning(&self) -> Option<String> {
        if self.wall_check_run_ns <= 0 {
            return None;
        }
        let spans_s = self.wall_check_run_ns as f64 / 1e9;
        match self.wall_drift_ppm() {
            Some(ppm) if ppm.abs() >= WALL_DRIFT_WARN_PPM => Some(format!(
                "the machine's wall clock ran {ppm:+} ppm against its monotonic clock over the run's {spans_s:.1} s; database commit times were mapped through both (wall_check_* in run.json)"
            )),
            Some(_) => None,
            None => Some(format!(
                "the machine's wall clock was stepped during the run ({:.1} s of wall clock over {spans_s:.1} s of monotonic time); database commit times were taken as they read",
                (self.wall_check_unix_ns - self.start_unix_ns) as f64 / 1e9
            )),
        }
    }

    /// Monotonic ns since the start for a wall-clock instant (saturating).
    pub fn run_ns_at_unix_ns(&self, unix_ns: i64) -> i64 {
        let since = unix_ns as i128 - self.start_unix_ns as i128;
        let run = match self.wall_spans() {
            Some((run, wall)) => since * run / wall,
            None => since,
        };
        run.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// A real duration, in ns, expressed as scenario ms.
    pub fn scenario_ms_for_real_ns(&self, real_ns: i64) -> i64 {
        ((real_ns as i128 * 1000) / self.real_ns_per_scenario_s as i128) as i64
    }

    /// A scenario duration, in ms, expressed as real ns.
    pub fn real_ns_for_scenario_ms(&self, scenario_ms: i64) -> i64 {
        ((scenario_ms as i128 * self.real_ns_per_scenario_s as i128) / 1000) as i64
    }

    /// A scenario duration, in ms, as whole real ms (at least 1 when positive).
    pub fn real_ms_for_scenario_ms(&self, scenario_ms: i64) -> i64 {
        let ns = self.real_ns_for_scenario_ms(scenario_ms);
        let ms = (ns + 500_000) / 1_000_000;
        if scenario_ms > 0 {
            ms.max(1)
        } else {
            ms
        }
    }

    /// Wall-clock Unix ns at a scenario time.
    pub fn unix_ns_at_scenario_ms(&self, scenario_ms: i64) -> i64 {
        let run = self.real_ns_for_scenario_ms(scenario_ms - self.start_scenario_ms) as i128;
        let since = match self.wall_spans() {
            Some((r, wall)) => run * wall / r,
            None => run,
        };
        (self.start_unix_ns as i128 + since).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// The reading timestamp (Unix ms, scenario calendar) at a scenario time.
    pub fn reading_ts_ms(&self, scenario_ms: i64) -> i64 {
        self.scenario_day_unix_ms + scenario_ms
    }

    /// The scenario time of a reading timestamp.
    pub fn scenario_ms_of_reading(&self, ts_ms: i64) -> i64 {
        ts_ms - self.scenario_day_unix_ms
    }

    /// `HH:MM:SS.s` for a scenario time, the way reports print it.
    pub fn format(scenario_ms: i64) -> String {
        let day = scenario_ms.rem_euclid(DAY_MS);
        let (h, m) = (day / 3_600_000, (day / 60_000) % 60);
        // Tenths cut, not rounded, as a clock reads: rounding showed 59.96 s as "60.0".
        let tenths = (day % 60_000) / 100;
        format!("{h:02}:{m:02}:{:02}.{}", tenths / 10, tenths % 10)
    }

    /// Parse `HH:MM:SS` or `HH:MM:SS.mmm` into ms since midnight.
    pub fn parse_time_of_day(text: &str) -> Option<i64> {
        let mut parts = text.trim().split(':');
        let h: i64 = parts.next()?.parse().ok()?;
        let m: i64 = parts.next()?.parse().ok()?;
        let s: f64 = parts.next()?.parse().ok()?;
        if parts.next().is_some()
            || !(0..48).contains(&h)
            || !(0..60).contains(&m)
            || !(0.0..60.0).contains(&s)
        {
            return None;
        }
        Some(h * 3_600_000 + m * 60_000 + (s * 1000.0).round() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn april() -> ScenarioClock {
        ScenarioClock {
            start_unix_ns: 1_000_000_000_000,
            start_scenario_ms: ScenarioClock::parse_time_of_day("21:40:00").unwrap(),
            real_ns_per_scenario_s: 10_000_000,
            scenario_day_unix_ms: 1_776_038_400_000,
            wall_check_run_ns: 0,
            wall_check_unix_ns: 0,
        }
    }

    #[test]
    fn ten_real_ms_is_one_scenario_second() {
        let c = april();
        assert_eq!(
            c.scenario_ms_at_run_ns(10_000_000) - c.start_scenario_ms,
            1000
        );
        assert_eq!(c.real_ms_for_scenario_ms(60_000), 600);
        assert_eq!(
            ScenarioClock::format(c.scenario_ms_at_run_ns(2_675 * 10_000_000)),
            "22:24:35.0"
        );
    }

    #[test]
    fn a_time_just_short_of_a_minute_stays_in_its_minute() {
        // 22:25:59.96 once printed as "22:25:60.0".
        assert_eq!(ScenarioClock::format(80_759_960), "22:25:59.9");
        assert_eq!(ScenarioClock::format(80_760_000), "22:26:00.0");
        assert_eq!(ScenarioClock::format(80_735_049), "22:25:35.0");
    }

    #[test]
    fn parse_rejects_nonsense() {
        assert_eq!(
            ScenarioClock::parse_time_of_day("22:24:35.5"),
            Some(80_675_500)
        );
        assert_eq!(ScenarioClock::parse_time_of_day("22:61:00"), None);
        assert_eq!(ScenarioClock::parse_time_of_day("soon"), None);
    }

    /// A wall clock running 0.5% fast (as a VM's time sync was seen doing): a commit 27.58 s
    /// of wall clock after the start happened 27.44 s of monotonic time after it.
    #[test]
    fn a_slewed_wall_clock_maps_through_the_check() {
        let c = april();
        let slewed = c.with_wall_check(30_000_000_000, c.start_unix_ns + 30_150_000_000);
        let commit = c.start_unix_ns + 27_580_000_000;
        let run_ns = slewed.run_ns_at_unix_ns(commit);
        assert!((run_ns - 27_442_786_069).abs() < 1_000, "{run_ns}");
        assert_eq!(c.run_ns_at_unix_ns(commit), 27_580_000_000);
        let t = ScenarioClock::parse_time_of_day("22:25:44").unwrap();
        assert!((slewed.scenario_ms_at_unix_ns(slewed.unix_ns_at_scenario_ms(t)) - t).abs() <= 1);
        // A step of more than a tenth is not a slew: the clocks are taken as one.
        let stepped = c.with_wall_check(30_000_000_000, c.start_unix_ns + 90_000_000_000);
        assert_eq!(stepped.run_ns_at_unix_ns(commit), 27_580_000_000);
        // Both are said to the user; a steady clock is not.
        assert_eq!(slewed.wall_drift_ppm(), Some(5_000));
        let said = slewed.wall_drift_warning().unwrap();
        assert!(
            said.contains("+5000 ppm") && said.contains("30.0 s"),
            "{said}"
        );
        assert!(stepped.wall_drift_warning().unwrap().contains("stepped"));
        let steady = c.with_wall_check(30_000_000_000, c.start_unix_ns + 30_000_000_249);
        assert_eq!(steady.wall_drift_ppm(), Some(0));
        assert_eq!(steady.wall_drift_warning(), None);
        assert_eq!(c.wall_drift_warning(), None);
        // Stored runs have no check and read the same as before.
        let text = serde_json::to_string(&c).unwrap();
        assert!(!text.contains("wall_check"), "{text}");
        assert_eq!(serde_json::from_str::<ScenarioClock>(&text).unwrap(), c);
    }

    #[test]
    fn round_trip_wall_clock() {
        let c = april();
        let t = ScenarioClock::parse_time_of_day("22:25:10").unwrap();
        assert_eq!(c.scenario_ms_at_unix_ns(c.unix_ns_at_scenario_ms(t)), t);
    }
}
