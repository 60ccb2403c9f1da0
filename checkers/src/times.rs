//! Scenario-time helpers that never overflow on the claim audit's `-infinity`/`infinity` expiries.

use chaos_history::{RunMeta, ScenarioClock};

/// Milliseconds in a day, to say on which day a reading's timestamp falls.
const DAY_MS: i64 = 86_400_000;

/// A century of ns either side of the run's start: anything further is
/// `-infinity`/`infinity` in disguise and is clamped so arithmetic stays in range.
const CLAMP_NS: i64 = 100 * 365 * DAY_MS * 1_000_000;

/// Scenario ms of a wall-clock instant (Unix ns), clamped to a century around the run.
pub fn scenario_ms(clock: &ScenarioClock, unix_ns: i64) -> i64 {
    let lo = clock.start_unix_ns.saturating_sub(CLAMP_NS);
    let hi = clock.start_unix_ns.saturating_add(CLAMP_NS);
    clock.scenario_ms_at_unix_ns(unix_ns.clamp(lo, hi))
}

/// Scenario seconds between two wall-clock instants (Unix ns).
pub fn scenario_s_between(clock: &ScenarioClock, from_unix_ns: i64, to_unix_ns: i64) -> f64 {
    (scenario_ms(clock, to_unix_ns) - scenario_ms(clock, from_unix_ns)) as f64 / 1000.0
}

/// `HH:MM:SS.s` for a scenario time.
pub fn format_ms(scenario_ms: i64) -> String {
    ScenarioClock::format(scenario_ms)
}

/// A reading's timestamp as a person compares it with the incident: the
/// time of day, prefixed with the day offset when it is not the scenario's day
/// (a year of seeded history starts at `-365d 21:40:00.0`).
pub fn format_reading(clock: &ScenarioClock, ts_ms: i64) -> String {
    let ms = clock.scenario_ms_of_reading(ts_ms);
    let day = ms.div_euclid(DAY_MS);
    if day == 0 {
        format_ms(ms)
    } else {
        format!("{day:+}d {}", format_ms(ms))
    }
}

/// Seconds rounded to milliseconds, so JSON shows `71.0`, not `70.99999999`.
pub fn round_s(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> ScenarioClock {
        ScenarioClock {
            start_unix_ns: 1_000_000_000_000,
            start_scenario_ms: 78_000_000,
            real_ns_per_scenario_s: 10_000_000,
            scenario_day_unix_ms: 1_776_038_400_000,
            wall_check_run_ns: 0,
            wall_check_unix_ns: 0,
        }
    }

    #[test]
    fn infinite_expiries_do_not_overflow() {
        let c = clock();
        assert!(scenario_ms(&c, i64::MIN) < 0);
        assert!(scenario_ms(&c, i64::MAX) > 78_000_000);
    }

    #[test]
    fn a_reading_a_year_back_names_its_day() {
        let c = clock();
        let ts = c.reading_ts_ms(78_000_000) - 365 * DAY_MS;
        assert_eq!(format_reading(&c, ts), "-365d 21:40:00.0");
        assert_eq!(
            format_reading(&c, c.reading_ts_ms(80_785_000)),
            "22:26:25.0"
        );
    }
}

/// A liveness finding's severity: an error when the run completed, information when it was
/// cut short (the work may simply not have got there).
pub fn liveness_severity(meta: &RunMeta) -> crate::Severity {
    if meta.completed {
        crate::Severity::Error
    } else {
        crate::Severity::Info
    }
}
