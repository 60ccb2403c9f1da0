//! The per-run report in a real headless browser: run gc-pause through the built `chaos` binary, load its report.html in Debian's chromium, and check the rendered DOM (lanes, verdict) and a screenshot.

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
