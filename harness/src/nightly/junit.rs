//! `junit.xml`: one testcase per run, named `scenario[seed]`, in the Ant/Surefire JUnit format CI systems read (Jenkins, GitLab, GitHub's test reporters): an invalid run is a `failure` whose message is its first error anomaly, a run that could not be judged is `skipped` with the reason, a harness failure is an `error`; the run directory and its replay command in `system-out`.

use super::summary::{RunLine, Summary};
use chaos_checkers::Validity;
use std::fmt::Write;

/// The whole document.
pub fn render(s: &Summary) -> String {
    let c = s.counts();
    let time = format!("{:.3}", s.runs.iter().map(|r| r.wall_s).sum::<f64>());
    let (name, seed, started) = match s.campaigns.first() {
        Some(c) => (
            format!("chaos nightly (seed {})", c.seed),
            c.seed.to_string(),
            iso(&c.started),
        ),
        None => ("chaos nightly".to_string(), String::new(), String::new()),
    };
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{time}\">",
        attr(&name),
        c.runs,
        c.invalid,
        c.failed
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{time}\" timestamp=\"{}\" hostname=\"{}\">",
        attr(&name),
        c.runs,
        c.invalid,
        c.failed,
        c.unknown,
        attr(&started),
        attr(&hostname())
    );
    x.push_str("    <properties>\n");
    let mut prop = |k: &str, v: &str| {
        let _ = writeln!(
            x,
            "      <property name=\"{}\" value=\"{}\"/>",
            attr(k),
            attr(v)
        );
    };
    prop("seed", &seed);
    for (i, camp) in s.campaigns.iter().enumerate() {
        let p = if s.campaigns.len() > 1 {
            format!("campaign.{i}.")
        } else {
            String::new()
        };
        prop(&format!("{p}mover"), &camp.mover);
        prop(&format!("{p}command"), &camp.command);
        prop(&format!("{p}git_commit"), &camp.git_commit);
        if let Some(shard) = &camp.shard {
            prop(&format!("{p}shard"), shard);
        }
    }
    for why in &s.stopped {
        prop("stopped", why);
    }
    // How many runs reached each dangerous moment (0: the campaign never met it).
    for (moment, runs) in s.reached() {
        prop(&format!("reached.{moment}"), &runs.to_string());
    }
    x.push_str("    </properties>\n");
    for r in &s.runs {
        testcase(&mut x, r);
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

fn testcase(x: &mut String, r: &RunLine) {
    let _ = writeln!(
        x,
        "    <testcase name=\"{}\" classname=\"chaos.{}\" time=\"{:.3}\">",
        attr(&r.name),
        attr(&r.scenario),
        r.wall_s
    );
    match (&r.verdict, &r.error) {
        (_, Some(e)) => {
            let _ = writeln!(
                x,
                "      <error message=\"{}\" type=\"harness\">{}</error>",
                attr(e),
                text(e)
            );
        }
        (Some(Validity::Invalid), _) => {
            let (class, summary) = r
                .first_error
                .clone()
                .unwrap_or_else(|| ("invalid".into(), "the run is invalid".into()));
            let _ = writeln!(
                x,
                "      <failure message=\"{}\" type=\"{}\">{}</failure>",
                attr(&format!("{class}: {summary}")),
                attr(&class),
                text(&r.outcome())
            );
        }
        (Some(Validity::Unknown), _) => {
            let _ = writeln!(
                x,
                "      <skipped message=\"{}\"/>",
                attr(&format!("unknown: {}", r.reasons.join("; ")))
            );
        }
        _ => {}
    }
    let mut out = String::new();
    if let Some(d) = &r.dir {
        let _ = writeln!(out, "run: {d}");
    }
    if let Some(c) = &r.replay {
        let _ = writeln!(out, "replay: {c}");
    }
    if r.verdict.is_some() {
        let names: Vec<&str> = r.reached.iter().map(|m| m.name()).collect();
        let _ = writeln!(
            out,
            "reached: {}",
            if names.is_empty() {
                "nothing".into()
            } else {
                names.join(", ")
            }
        );
    }
    if !out.is_empty() {
        let _ = writeln!(x, "      <system-out>{}</system-out>", text(&out));
    }
    x.push_str("    </testcase>\n");
}

/// `2026-12-02T07:52:48` (the timestamp JUnit readers parse) from `20261202T075248Z`.
fn iso(stamp: &str) -> String {
    let d: Vec<char> = stamp.chars().filter(|c| c.is_ascii_digit()).collect();
    if d.len() < 14 {
        return String::new();
    }
    let s = |a: usize, b: usize| d[a..b].iter().collect::<String>();
    format!(
        "{}-{}-{}T{}:{}:{}",
        s(0, 4),
        s(4, 6),
        s(6, 8),
        s(8, 10),
        s(10, 12),
        s(12, 14)
    )
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// Text content: XML's specials escaped, and characters XML 1.0 cannot hold left out.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\t' | '\n' | '\r' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// An attribute's value: as text, and quotes and line ends as references.
fn attr(s: &str) -> String {
    text(s)
        .replace('"', "&quot;")
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
        .replace('\t', "&#9;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_and_control_characters_are_escaped_or_left_out() {
        assert_eq!(attr("a<b & \"c\"\n"), "a&lt;b &amp; &quot;c&quot;&#10;");
        assert_eq!(text("x\u{1}y\u{7}z"), "xyz");
        assert_eq!(iso("20261202T075248Z"), "2026-12-02T07:52:48");
    }
}
