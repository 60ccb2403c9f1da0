//! Small text helpers: HTML escaping, scenario-time and number formatting, one-line JSON for hover titles (`shown` renders values for reading).

use chaos_history::ScenarioClock;
use std::borrow::Cow;

/// Escapes text for use in HTML or SVG element content and in quoted attributes.
///
/// Every string that came from a run (turbine names, box names, reasons,
/// evidence) passes through here: a mover under test is free to print anything.
pub fn esc(text: &str) -> Cow<'_, str> {
    if !text.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `HH:MM:SS.s`, the way every report and the incident write-up print time.
pub fn time(scenario_ms: i64) -> String {
    ScenarioClock::format(scenario_ms)
}

/// `HH:MM:SS` (no fraction) for axis labels, where a tenth of a second is noise.
pub fn time_whole(scenario_ms: i64) -> String {
    let day = scenario_ms.rem_euclid(86_400_000);
    let (h, m, s) = (day / 3_600_000, (day / 60_000) % 60, (day / 1000) % 60);
    format!("{h:02}:{m:02}:{s:02}")
}

/// A scenario duration in a person's units: `850 ms`, `34.0 s`, `12 min 5 s`.
pub fn duration(scenario_ms: i64) -> String {
    let ms = scenario_ms.abs();
    let sign = if scenario_ms < 0 { "-" } else { "" };
    if ms < 1000 {
        format!("{sign}{ms} ms")
    } else if ms < 120_000 {
        format!("{sign}{:.1} s", ms as f64 / 1000.0)
    } else if ms < 7_200_000 {
        format!("{sign}{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    } else {
        format!(
            "{sign}{} h {} min",
            ms / 3_600_000,
            (ms % 3_600_000) / 60_000
        )
    }
}

/// An integer with thin thousands separators, so 15768000 reads as 15 768 000.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    out
}

/// A latency in scenario ms with a precision that suits its size.
pub fn ms(value_ms: f64) -> String {
    if value_ms >= 100.0 {
        format!("{value_ms:.0}")
    } else if value_ms >= 10.0 {
        format!("{value_ms:.1}")
    } else {
        format!("{value_ms:.2}")
    }
}

/// A JSON value on one line, cut at `max_chars` (characters, not bytes) with an ellipsis.
///
/// Used for hover titles, where a whole evidence blob would swamp the page.
pub fn json_line(value: &serde_json::Value, max_chars: usize) -> String {
    let text = match value {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    truncate_chars(text, max_chars)
}

/// Cuts a string at `max_chars` characters, adding an ellipsis when it did.
pub fn truncate_chars(text: String, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text,
        Some((cut, _)) => {
            let mut short = text[..cut].to_string();
            short.push('…');
            short
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_every_special_character() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        assert!(matches!(esc("AP-0161"), Cow::Borrowed(_)));
    }

    #[test]
    fn formats_time_and_counts() {
        assert_eq!(time_whole(80_710_000), "22:25:10");
        assert_eq!(time(80_710_500), "22:25:10.5");
        assert_eq!(count(15_768_000), "15\u{2009}768\u{2009}000");
        assert_eq!(count(999), "999");
        assert_eq!(duration(34_000), "34.0 s");
        assert_eq!(duration(3_300_000), "55 min 0 s");
    }

    #[test]
    fn cut_strings_say_so() {
        assert_eq!(truncate_chars("ééééé".into(), 3), "ééé…");
    }
}
