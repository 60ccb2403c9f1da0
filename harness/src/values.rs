//! What a person types for a duration or a number on the command line, checked once with a
//! message that says what to type instead (clap's value parsers; `main.rs` prints the first line).

/// `60s`, `5s`, `1m`, `500ms`, `2h` -> seconds; above zero. A bare number is refused: `5`
/// read as seconds ran a whole night with a 5 s lease (as Go's `time.ParseDuration` and
/// humantime, a duration carries its unit).
pub fn parse_duration_s(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        return Err(match t.parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => no_unit(t),
            Ok(_) => format!("'{text}' must be above zero"),
            Err(_) => format!("'{text}' is not a duration like 60s, 500ms or 1m"),
        });
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a duration like 60s, 500ms or 1m"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("'{text}' must be above zero"));
    }
    Ok(v * mult)
}

/// The line for a number typed without its unit.
fn no_unit(t: &str) -> String {
    format!("'{t}' has no unit: write {t}s for seconds (or {t}ms, {t}m, {t}h)")
}

/// `--lease`: a positive duration in scenario time, at most a day.
pub fn lease_s(text: &str) -> Result<f64, String> {
    positive_duration("a lease", "60s", text)
}

/// `--silence`: the failover watcher's silence constant, a positive duration.
pub fn silence_s(text: &str) -> Result<f64, String> {
    positive_duration("a silence", "30s", text)
}

/// A positive duration (`60s`, `500ms`, `1m`, `2h`; a unit is required), in seconds.
pub fn positive_duration(what: &str, example: &str, text: &str) -> Result<f64, String> {
    within(what, example, text, 86_400.0, "a day (24h)")
}

/// A positive duration of at most `max_s`, or a line naming what it is and an example.
fn within(what: &str, example: &str, text: &str, max_s: f64, max: &str) -> Result<f64, String> {
    match parse_duration_s(text) {
        Ok(s) if s <= max_s => Ok(s),
        Ok(_) => Err(format!("{what} must be at most {max}")),
        Err(_) if bare_number(text) => Err(format!(
            "{what} needs a unit: {}",
            no_unit(text.trim()).split_once(": ").map_or("", |(_, w)| w)
        )),
        Err(_) => Err(format!(
            "{what} must be a positive duration, like {example}"
        )),
    }
}

/// A positive number with no unit after it.
fn bare_number(text: &str) -> bool {
    text.trim()
        .parse::<f64>()
        .is_ok_and(|v| v > 0.0 && v.is_finite())
}

/// `--time-scale-ms`: real milliseconds per scenario second, above zero and at most 10 s.
pub fn time_scale_ms(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1000.0 => Ok(v),
        _ => Err(
            "the time scale must be a number of real milliseconds per scenario second above 0 and at most 1000, like 10"
                .into(),
        ),
    }
}

/// `--seed`: a whole number from 0 to 2^64-1.
pub fn seed(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| "a seed must be a whole number from 0 to 18446744073709551615, like 42".into())
}

/// A count that must be at least 1 (`--rows-per-turbine`, `--repeat`, `--events`, `--rows`).
pub fn count(text: &str) -> Result<u64, String> {
    match text.trim().replace('_', "").parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number of at least 1, like 5".into()),
    }
}

/// [`count`] that fits a `u32`.
pub fn count_u32(text: &str) -> Result<u32, String> {
    let n = count(text)?;
    u32::try_from(n).map_err(|_| format!("must be at most {}", u32::MAX))
}

/// [`count`] as a `usize`.
pub fn count_usize(text: &str) -> Result<usize, String> {
    count(text).map(|n| n as usize)
}

/// A whole number, 0 allowed, that fits a `u32` (`--generated 0`: the scenarios only).
pub fn whole_u32(text: &str) -> Result<u32, String> {
    text.trim()
        .replace('_', "")
        .parse::<u32>()
        .map_err(|_| format!("must be a whole number from 0 to {}, like 4", u32::MAX))
}

/// A campaign's or a search's wall-time budget: a positive duration of at most a week.
pub fn budget_s(text: &str) -> Result<f64, String> {
    within(
        "a budget",
        "30m or 2h",
        text,
        7.0 * 86_400.0,
        "a week (168h)",
    )
}

/// A size on disk: `500M`, `10G`, `1.5G`, `800K` or a number of bytes.
pub fn bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => 0,
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if mult > 0 && v > 0.0 && v.is_finite() => Ok((v * mult as f64) as u64),
        _ => Err("a size must be positive, like 500M or 10G".into()),
    }
}

/// A size as a person reads it (`1.2 GiB`).
pub fn show_bytes(n: u64) -> String {
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in units {
        if n >= size {
            return format!("{:.1} {name}", n as f64 / size as f64);
        }
    }
    format!("{n} B")
}

/// `--expect`: the verdict a run (or a campaign) is expected to get.
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum Expect {
    Valid,
    Invalid,
    Unknown,
}

impl From<Expect> for chaos_checkers::Validity {
    fn from(e: Expect) -> chaos_checkers::Validity {
        match e {
            Expect::Valid => chaos_checkers::Validity::Valid,
            Expect::Invalid => chaos_checkers::Validity::Invalid,
            Expect::Unknown => chaos_checkers::Validity::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_budgets_read_as_typed() {
        assert_eq!(bytes("10G"), Ok(10 << 30));
        assert_eq!(bytes("500m"), Ok(500 << 20));
        assert_eq!(bytes("1234"), Ok(1234));
        assert!(bytes("-1G").is_err() && bytes("5X").is_err());
        assert_eq!(show_bytes(3 << 29), "1.5 GiB");
        assert_eq!(budget_s("30m"), Ok(1800.0));
        assert!(budget_s("0s").is_err() && budget_s("9999h").is_err());
        assert_eq!(whole_u32("0"), Ok(0));
    }

    #[test]
    fn a_negative_lease_is_refused_with_what_to_type() {
        assert_eq!(
            lease_s("-5s").unwrap_err(),
            "a lease must be a positive duration, like 60s"
        );
        assert_eq!(
            lease_s("soon").unwrap_err(),
            "a lease must be a positive duration, like 60s"
        );
        assert_eq!(
            lease_s("0").unwrap_err(),
            "a lease must be a positive duration, like 60s"
        );
        assert_eq!(lease_s("90s"), Ok(90.0));
        assert_eq!(lease_s("500ms"), Ok(0.5));
        assert!(lease_s("2d").is_err());
        assert_eq!(
            lease_s("25h").unwrap_err(),
            "a lease must be at most a day (24h)"
        );
    }

    /// `chaos run april --lease 5` ran the whole night with a 5 s lease, `nightly --budget 5`
    /// for five seconds (issue 33): a bare number is refused with what to type.
    #[test]
    fn a_duration_without_a_unit_is_refused_with_an_example() {
        assert_eq!(
            lease_s("5").unwrap_err(),
            "a lease needs a unit: write 5s for seconds (or 5ms, 5m, 5h)"
        );
        assert_eq!(
            budget_s("5").unwrap_err(),
            "a budget needs a unit: write 5s for seconds (or 5ms, 5m, 5h)"
        );
        assert!(silence_s("30").unwrap_err().contains("write 30s"));
        assert_eq!(
            parse_duration_s("2.5").unwrap_err(),
            "'2.5' has no unit: write 2.5s for seconds (or 2.5ms, 2.5m, 2.5h)"
        );
        assert_eq!(parse_duration_s("2.5s"), Ok(2.5));
        assert_eq!(lease_s("5s"), Ok(5.0));
    }

    #[test]
    fn numbers_say_what_they_must_be() {
        assert_eq!(seed("42"), Ok(42));
        assert!(seed("-1")
            .unwrap_err()
            .starts_with("a seed must be a whole number"));
        assert!(time_scale_ms("0").is_err());
        assert!(time_scale_ms("-3").is_err());
        assert_eq!(time_scale_ms("2.5"), Ok(2.5));
        assert!(count("0").is_err());
        assert!(count("-4").is_err());
        assert_eq!(count("10_000"), Ok(10_000));
        assert!(count_u32("5000000000").is_err());
    }
}
