//! Galewatch's data: turbine serials, routing by `hash(serial) % n`, the move plan, seeded history and the SQL that loads it.

use chaos_history::{PlanEntry, Run, SeededTurbine};
use std::collections::BTreeMap;

/// A year of readings at one every 2 s.
pub const YEAR_MS: i64 = 365 * 86_400_000;

/// The turbines of one farm and how they are routed before and after the divisor change.
#[derive(Debug, Clone)]
pub struct Farm {
    pub turbines: u32,
    pub seeded_turbines: u32,
    pub rows_per_turbine: u32,
    pub old_divisor: u32,
    pub new_divisor: u32,
}

impl Farm {
    /// Ardnave Point as `scenarios/april.toml` has it: 300 turbines, 200 seeded with
    /// 15,768 readings each (1/1000 of a year at 2 s), routed `% 2` becoming `% 3`.
    pub fn ardnave_point() -> Farm {
        Farm {
            turbines: 300,
            seeded_turbines: 200,
            rows_per_turbine: 15_768,
            old_divisor: 2,
            new_divisor: 3,
        }
    }

    /// `AP-0001` ... The serial's number is its hash: with 200 turbines and
    /// 2 -> 3 shards that moves exactly 133, as at Ardnave Point.
    pub fn serial(n: u32) -> String {
        format!("AP-{n:04}")
    }

    pub fn number(serial: &str) -> Option<u32> {
        serial.strip_prefix("AP-")?.parse().ok()
    }

    pub fn shard(n: u32, divisor: u32) -> String {
        format!("shard{}", n % divisor + 1)
    }

    /// Every turbine and its shard under the new divisor.
    pub fn owners(&self) -> BTreeMap<String, String> {
        (1..=self.turbines)
            .map(|n| (Self::serial(n), Self::shard(n, self.new_divisor)))
            .collect()
    }

    /// The seeded turbines whose shard changes, in serial order.
    pub fn plan(&self) -> Vec<PlanEntry> {
        (1..=self.seeded_turbines)
            .filter(|&n| Self::shard(n, self.old_divisor) != Self::shard(n, self.new_divisor))
            .enumerate()
            .map(|(i, n)| PlanEntry {
                position: i as i32 + 1,
                turbine: Self::serial(n),
                from: Self::shard(n, self.old_divisor),
                to: Self::shard(n, self.new_divisor),
            })
            .collect()
    }

    /// Spacing of seeded readings: a year spread over `rows_per_turbine` (2,000 s at the default).
    pub fn seed_step_ms(&self) -> i64 {
        YEAR_MS / self.rows_per_turbine as i64
    }

    /// Seeded history: `rows_per_turbine` readings ending one step before `end_ts_ms`.
    pub fn seeded(&self, end_ts_ms: i64) -> Vec<SeededTurbine> {
        let step = self.seed_step_ms();
        let rows = self.rows_per_turbine as i64;
        (1..=self.seeded_turbines)
            .map(|n| SeededTurbine {
                turbine: Self::serial(n),
                shard: Self::shard(n, self.old_divisor),
                run: Run {
                    first_ms: end_ts_ms - rows * step,
                    last_ms: end_ts_ms - step,
                    step_ms: if rows > 1 { step } else { 0 },
                    copies: 1,
                },
            })
            .collect()
    }

    /// Turbine numbers seeded on `shard` (old divisor).
    pub fn seeded_on(&self, shard: &str) -> Vec<i32> {
        (1..=self.seeded_turbines)
            .filter(|&n| Self::shard(n, self.old_divisor) == shard)
            .map(|n| n as i32)
            .collect()
    }

    /// Turbines the ingest writes to `shard` (new divisor).
    pub fn ingested_on(&self, shard: &str) -> Vec<String> {
        (1..=self.turbines)
            .filter(|&n| Self::shard(n, self.new_divisor) == shard)
            .map(Self::serial)
            .collect()
    }
}

/// Server-side generation of the seeded history for one shard: parameters
/// `$1 int[]` turbine numbers, `$2 bigint` first ts (Unix ms), `$3 bigint`
/// step ms, `$4 int` rows per turbine. One statement, no rows over the wire.
pub const SEED_SQL: &str = "insert into readings (turbine_id, ts, value) \
    select 'AP-' || lpad(t::text, 4, '0'), \
           timestamptz 'epoch' + ($2 + i * $3) * interval '1 millisecond', \
           ((t * 7919 + ($2 + i * $3) / 2000) % 997) / 10.0 \
      from unnest($1::int[]) as t, generate_series(0::bigint, $4::bigint - 1) as i";

/// A reading's value: a function of (turbine, ts), so a row whose value is not this one
/// was changed on its way (a copy that altered values or moved rows along the time grid).
/// Modulo a prime, so a year's readings 2,000 s apart do not all share one value.
pub fn reading_value(turbine: &str, ts_ms: i64) -> f64 {
    numbered_reading_value(Farm::number(turbine).unwrap_or(0) as i64, ts_ms)
}

/// The turbine number [`reading_value`] is a function of, for a name that is a serial
/// (`AP-` and 1 to 9 digits); None for any other name, whose values cannot be compared.
pub fn serial_number(turbine: &str) -> Option<i64> {
    let digits = turbine.strip_prefix("AP-")?;
    let plain = (1..=9).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit());
    plain.then(|| digits.parse().ok()).flatten()
}

/// [`reading_value`] for a turbine already numbered by [`serial_number`]: the final read
/// compares every row with it, so the name is parsed once per turbine, not once per row.
pub fn numbered_reading_value(n: i64, ts_ms: i64) -> f64 {
    ((n * 7919 + ts_ms.div_euclid(2000)).rem_euclid(997)) as f64 / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_serial_is_numbered_for_the_value_check() {
        assert_eq!(serial_number("AP-0002"), Some(2));
        assert_eq!(serial_number("AP-123456789"), Some(123_456_789));
        for other in [
            "AP-",
            "AP-+5",
            "AP-1234567890",
            "AP-12a",
            "XX-0002",
            "ap-0002",
        ] {
            assert_eq!(serial_number(other), None, "{other}");
        }
        let n = serial_number("AP-0161").unwrap();
        assert_eq!(
            numbered_reading_value(n, 1_776_000_000_000),
            reading_value("AP-0161", 1_776_000_000_000)
        );
    }

    fn ardnave() -> Farm {
        Farm::ardnave_point()
    }

    #[test]
    fn ardnave_point_moves_133_of_200() {
        let plan = ardnave().plan();
        assert_eq!(plan.len(), 133);
        assert_eq!(plan[107].turbine, "AP-0161");
        assert_eq!(
            (plan[107].from.as_str(), plan[107].to.as_str()),
            ("shard2", "shard3")
        );
    }

    #[test]
    fn a_year_at_the_default_scale_is_one_reading_every_2000_s() {
        let f = ardnave();
        assert_eq!(f.seed_step_ms(), 2_000_000);
        let s = f.seeded(YEAR_MS);
        assert_eq!(s[0].run.len(), 15_768);
        assert_eq!(s[0].run.first_ms, 0);
    }
}
