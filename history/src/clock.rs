//! The scenario clock: maps real time (monotonic or wall) onto the scaled scenario time reports print.

use serde::{Deserialize, Serialize};

/// Milliseconds in a day, the modulus for printing a scenario time of day.
const DAY_MS: i64 = 86_400_000;

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
}

impl ScenarioClock {
    /// Scenario ms for a real duration since the run's start (monotonic ns).
    pub fn scenario_ms_at_run_ns(&self, run_ns: i64) -> i64 {
        self.start_scenario_ms + self.scenario_ms_for_real_ns(run_ns)
    }

    /// Scenario ms for a wall-clock instant (for example a commit timestamp).
    pub fn scenario_ms_at_unix_ns(&self, unix_ns: i64) -> i64 {
        self.scenario_ms_at_run_ns(unix_ns - self.start_unix_ns)
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
        self.start_unix_ns + self.real_ns_for_scenario_ms(scenario_ms - self.start_scenario_ms)
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

    #[test]
    fn round_trip_wall_clock() {
        let c = april();
        let t = ScenarioClock::parse_time_of_day("22:25:10").unwrap();
        assert_eq!(c.scenario_ms_at_unix_ns(c.unix_ns_at_scenario_ms(t)), t);
    }
}
