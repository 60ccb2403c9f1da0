//! `index.html`: a campaign's runs in a table, each with its verdict, its first finding, a link to its report and the command that replays it; self-contained, opens from disk.

use super::summary::Summary;
use chaos_checkers::Validity;
use std::fmt::Write;
use std::path::Path;

/// The page, with links relative to `dir` (where it is written).
pub fn render(s: &Summary, dir: &Path) -> String {
    let c = s.counts();
    let verdict = match s.verdict() {
        Some(v) => format!("{v:?}").to_uppercase(),
        None => "HARNESS FAILED".into(),
    };
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>chaos nightly</title><style>\
body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}\
td,th{border-bottom:1px solid #ddd;padding:.3em .8em;text-align:left;vertical-align:top}\
.valid{color:#176}.invalid{color:#b00;font-weight:bold}.unknown{color:#a60}.failed{color:#609}\
code{font-size:12px}</style></head><body>\n",
    );
    let _ = writeln!(
        h,
        "<h1>chaos nightly: {verdict}</h1><p>{} runs: {} invalid, {} unknown, {} failed in the harness; {:.0} s</p>",
        c.runs, c.invalid, c.unknown, c.failed, s.wall_s
    );
    for camp in &s.campaigns {
        let _ = writeln!(
            h,
            "<p>seed {} · {} · mover <code>{}</code>{} · <code>{}</code></p>",
            camp.seed,
            esc(&camp.started),
            esc(&camp.mover),
            camp.shard
                .as_ref()
                .map(|x| format!(" · shard {}", esc(x)))
                .unwrap_or_default(),
            esc(&camp.command)
        );
    }
    for why in &s.stopped {
        let _ = writeln!(h, "<p>stopped early: {}</p>", esc(why));
    }
    h.push_str("<h2>Dangerous moments reached</h2><table class=\"reached\"><tr><th>moment</th><th>runs</th></tr>\n");
    for (m, n) in s.reached() {
        let class = if n == 0 { "unknown" } else { "valid" };
        let _ = writeln!(
            h,
            "<tr><td>{m}</td><td class=\"{class}\">{n} of {}</td></tr>",
            c.runs
        );
    }
    h.push_str("</table>\n<h2>Runs</h2>");
    h.push_str("<table><tr><th>#</th><th>run</th><th>verdict</th><th>finding</th><th>reached</th><th>wall</th><th>report</th><th>replay</th></tr>\n");
    for r in &s.runs {
        let class = match (&r.verdict, &r.error) {
            (_, Some(_)) => "failed",
            (Some(Validity::Invalid), _) => "invalid",
            (Some(Validity::Unknown), _) => "unknown",
            _ => "valid",
        };
        let report = r
            .dir
            .as_ref()
            .map(|d| {
                let href = relative(Path::new(d).join("report.html").as_path(), dir);
                format!("<a href=\"{}\">report</a>", esc(&href))
            })
            .unwrap_or_default();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"{class}\">{class}</td><td>{}</td><td>{}</td><td>{:.1} s</td><td>{report}</td><td><code>{}</code></td></tr>",
            r.index,
            esc(&r.name),
            esc(&r.outcome()),
            r.reached.iter().map(|m| m.name()).collect::<Vec<_>>().join(", "),
            r.wall_s,
            esc(r.replay.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table></body></html>\n");
    h
}

/// `path` as seen from `from` when it lies below `from`'s parent chain, else as it is.
fn relative(path: &Path, from: &Path) -> String {
    let (Ok(p), Ok(f)) = (std::path::absolute(path), std::path::absolute(from)) else {
        return path.display().to_string();
    };
    let common = p
        .components()
        .zip(f.components())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = f.components().count() - common;
    let mut out = std::path::PathBuf::new();
    for _ in 0..ups {
        out.push("..");
    }
    for c in p.components().skip(common) {
        out.push(c);
    }
    out.display().to_string()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn links_are_relative_to_the_page() {
        let r = super::relative(
            std::path::Path::new("/r/nightly/a/runs/april/x/report.html"),
            std::path::Path::new("/r/nightly/merged"),
        );
        assert_eq!(r, "../a/runs/april/x/report.html");
    }
}
