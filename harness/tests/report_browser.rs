//! The per-run report in a real headless browser: run gc-pause through the built `chaos` binary and re-check a stored April run (`chaos check` writes its report as a run does), load their report.html in Debian's chromium, and check the rendered DOM (lanes, verdict, what is above the fold of a 1400x900 window) and a screenshot.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str = "apt-get install -y chromium";

fn chromium() -> PathBuf {
    for c in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(c).is_file() {
            return PathBuf::from(c);
        }
    }
    panic!("chromium is not installed, and this test needs a real browser: {INSTALL} (scripts/setup installs it)");
}

/// Run a command with a time limit; past it the child (by its own pid) is killed and the test fails.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    // Drain stdout on a thread: a dumped DOM is larger than a pipe's buffer.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut s).unwrap();
        s
    });
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} took more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut out = child.wait_with_output().unwrap();
    out.stdout = reader.join().unwrap();
    out
}

#[test]
fn gc_pause_report_renders_in_headless_chromium() {
    let browser = chromium();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_chaos"));
    assert!(
        bin.with_file_name("mover").is_file(),
        "the reference mover is not built beside {}: run `cargo build -p chaos-workloads` (same profile) first",
        bin.display()
    );
    let results = std::env::temp_dir().join(format!("chaos-test-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&results);
    let out = run(
        Command::new(&bin)
            .args(["run", "gc-pause", "--quiet", "--results"])
            .arg(&results)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/..")),
        Duration::from_secs(300),
    );
    let code = out.status.code();
    assert!(
        matches!(code, Some(0..=2)),
        "chaos run gc-pause failed in the harness (exit {code:?}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = std::fs::canonicalize(results.join("latest")).expect("results/latest");
    let report = run_dir.join("report.html");
    assert!(report.is_file(), "{} is missing", report.display());
    let url = format!("file://{}", report.display());

    let profile = results.join("chromium-profile");
    let dom = run(
        Command::new(&browser).args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &url,
        ]),
        Duration::from_secs(120),
    );
    let html = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    assert!(dom.status.success(), "chromium --dump-dom failed: {log}");
    assert!(
        html.len() > 10_000,
        "the DOM is nearly empty ({} bytes): {log}",
        html.len()
    );
    assert!(!log.contains("Uncaught"), "the page threw: {log}");
    assert!(
        html.contains("<title>gc-pause seed 7"),
        "no title in the DOM"
    );
    for lane in ["box-1", "box-2", "box-3", "box-4"] {
        assert!(
            html.contains(&format!(">{lane}</text>")),
            "no lane labelled {lane} in the rendered report"
        );
    }
    assert!(html.contains("claim (routing db)"), "no claim lane");
    // gc-pause loses a turbine without fencing: the verdict is on the page.
    assert!(
        html.contains("verdict v-invalid"),
        "no invalid verdict in the rendered report"
    );
    assert!(
        html.contains("lost-rows") || html.contains("lost rows"),
        "the lost rows are not reported"
    );

    let shot = results.join("report.png");
    let png = run(
        Command::new(&browser).args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            &format!("--user-data-dir={}", profile.display()),
            "--window-size=1400,2200",
            &format!("--screenshot={}", shot.display()),
            &url,
        ]),
        Duration::from_secs(120),
    );
    assert!(
        png.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&png.stderr)
    );
    let bytes = std::fs::read(&shot).expect("the screenshot");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert!(
        bytes.len() > 20_000,
        "a {}-byte screenshot is a blank page",
        bytes.len()
    );
    let _ = std::fs::remove_dir_all(&results);
}

/// What a script measured in the laid-out page, read back from the dumped DOM.
fn measured(dom: &str) -> serde_json::Value {
    let at = dom
        .find("<pre id=\"fold-check\">")
        .expect("the measuring script ran")
        + 21;
    let end = at + dom[at..].find("</pre>").unwrap();
    let text = dom[at..end].replace("&quot;", "\"");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Issue 33: "report.html buries the finding" (the checker stats open at the top, 60 rows
/// with raw JSON; the timeline and the verdict below them). An invalid April run's page, laid
/// out by chromium in a 1400x900 window, shows the verdict and every error anomaly above the
/// fold; the stats are folded and hold no raw JSON; the vacancy and the writes after expiry
/// are one figure each, the same in the key figures as in the verdict.
#[test]
fn april_report_shows_the_verdict_and_its_errors_above_the_fold() {
    let browser = chromium();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_chaos"));
    let results =
        std::env::temp_dir().join(format!("chaos-test-report-april-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&results);
    // A real April run, stored (checkers/tests/data/april-lease-only): `chaos check` writes its
    // report.html as `chaos run` does, from the run directory alone, without a 50 s April.
    let stored = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../checkers/tests/data/april-lease-only"
    ));
    let run_dir = results.join("april");
    std::fs::create_dir_all(&run_dir).unwrap();
    for f in [
        "run.json",
        "history.jsonl",
        "audit.json",
        "final-state.json",
    ] {
        std::fs::copy(stored.join(f), run_dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let out = run(
        Command::new(&bin).args(["check", "--quiet"]).arg(&run_dir),
        Duration::from_secs(120),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "april without fencing is invalid: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read_to_string(run_dir.join("report.html")).expect("report.html");
    // The page as it is, with a script that measures it once laid out.
    let probe = r#"<script>(function(){
  const fold = window.innerHeight;
  const rows = [...document.querySelectorAll('#verdict tr.sev-error')];
  const below = rows.filter(r => r.getBoundingClientRect().bottom > fold).map(r => r.cells[0].textContent);
  const stats = document.querySelector('details.stats');
  const out = document.createElement('pre');
  out.id = 'fold-check';
  out.textContent = JSON.stringify({fold, width: window.innerWidth, errors: rows.length, below,
    verdict_top: document.querySelector('#verdict').getBoundingClientRect().top,
    stats_open: stats ? stats.open : null});
  document.body.appendChild(out);
})();</script></body>"#;
    let page = results.join("fold.html");
    std::fs::write(&page, report.replacen("</body>", probe, 1)).unwrap();
    let profile = results.join("chromium-profile");
    let dom = run(
        Command::new(&browser).args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            &format!("--user-data-dir={}", profile.display()),
            "--window-size=1400,900",
            "--dump-dom",
            &format!("file://{}", page.display()),
        ]),
        Duration::from_secs(120),
    );
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let m = measured(&html);
    // A 1400x900 window: its viewport is 900 px high at most (headless chromium's
    // --dump-dom keeps room for a window's frame, as a desktop browser does: 757 px here).
    let fold = m["fold"].as_u64().unwrap();
    assert!((700..=900).contains(&fold), "the window is 1400x900: {m}");
    assert!(
        m["errors"].as_u64().unwrap() >= 2,
        "lost rows and more: {m}"
    );
    assert_eq!(
        m["below"],
        serde_json::json!([]),
        "every error above the fold: {m}"
    );
    assert_eq!(m["stats_open"], false, "the checker stats are folded: {m}");

    // The stats hold no raw JSON: times as times, lists as lists.
    let stats = &html[html.find("<details class=\"stats\">").expect("stats")..];
    let stats = &stats[..stats.find("</details>").unwrap()];
    for raw in ["{&quot;", "[{", "\":", "&quot;:"] {
        assert!(
            !stats.contains(raw),
            "raw JSON ({raw}) in the stats: {stats}"
        );
    }
    assert!(
        stats.contains("<th>holder</th>"),
        "the grants as a table: {stats}"
    );

    // One figure per fact: the key figures' vacancy and writes after expiry are the verdict's.
    let figure = |label: &str| {
        let at = html
            .find(label)
            .unwrap_or_else(|| panic!("no figure '{label}'"));
        let val = html[..at].rfind("<div class=\"val\">").unwrap() + 17;
        html[val..val + html[val..].find('<').unwrap()].to_string()
    };
    let vacancy = figure("vacancy while the plan ran");
    assert!(
        html.contains(&format!("{vacancy} in all")),
        "the verdict's vacancy is {vacancy} too"
    );
    let wrote = figure("box-2 wrote after its lease expired");
    assert!(
        html.contains(&format!("box-2 wrote for {wrote} after its lease")),
        "the verdict's writes after expiry are {wrote} too"
    );
    let _ = std::fs::remove_dir_all(&results);
}
