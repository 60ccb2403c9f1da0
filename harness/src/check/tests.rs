//! The streamed check against the in-memory one: the same verdict, story and report.html for every planted run, in chunks of every size and on any number of decoders; and what odd files make of it.

use super::stream::{read_in, FileEvents};
use super::*;
use chaos_history::{Op, RunRecord};
use std::path::PathBuf;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("chaos-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cases() -> Vec<PathBuf> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../checkers/tests/data");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("run.json").is_file())
        // The failover system's planted runs are judged by its own check (failover/check.rs).
        .filter(|p| !crate::failover::check::is_failover_run(p))
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 20, "the planted runs are missing");
    dirs
}

/// What a check makes of a history: verdict, story, report, torn tail; or the error's line.
#[derive(Debug, PartialEq)]
struct Judged {
    verdict: Verdict,
    story: String,
    page: String,
    torn: bool,
}

fn page(
    meta: &RunMeta,
    digest: &chaos_report::HistoryDigest,
    events: &dyn chaos_report::EventLookup,
    record: &RunRecord,
    verdict: &Verdict,
) -> String {
    chaos_report::render(&chaos_report::ReportInput {
        meta,
        history: digest,
        events,
        audit: record.audit.as_ref(),
        verdict,
        extra: None,
    })
}

/// The streamed check of `path`, in chunks of `chunk` bytes on `decoders` decoders.
fn streamed(
    path: &Path,
    record: &RunRecord,
    chunk: usize,
    decoders: usize,
) -> Result<Judged, String> {
    let s = read_in(path, &record.meta, chunk, decoders).map_err(|e| e.to_string())?;
    let mut fold = s.fold;
    if s.torn_tail {
        fold.note_torn_tail();
    }
    let verdict = fold.finish(
        &record.meta,
        record.audit.as_ref(),
        record.final_state.as_ref(),
    );
    let events = FileEvents::open(path).unwrap();
    Ok(Judged {
        page: page(&record.meta, &s.digest, &events, record, &verdict),
        story: s.story.finish(&record.meta, &verdict),
        verdict,
        torn: s.torn_tail,
    })
}

/// The same run judged from events in memory: `chaos_checkers::check`, `chaos_report::story`, the report of a slice.
fn in_memory(record: &RunRecord, torn: bool) -> Judged {
    let mut fold = chaos_checkers::HistoryFold::new(&record.meta);
    for op in &record.history {
        fold.observe(op);
    }
    if torn {
        fold.note_torn_tail();
    }
    let verdict = fold.finish(
        &record.meta,
        record.audit.as_ref(),
        record.final_state.as_ref(),
    );
    if !torn {
        assert_eq!(verdict, chaos_checkers::check(record));
    }
    let digest = chaos_report::HistoryDigest::of(&record.meta, &record.history);
    Judged {
        page: page(&record.meta, &digest, &record.history, record, &verdict),
        story: chaos_report::story(record, &verdict),
        verdict,
        torn,
    }
}

fn record_of(dir: &Path, history: Vec<Op>) -> RunRecord {
    RunRecord {
        meta: results::read_json(&dir.join("run.json")).unwrap(),
        history,
        torn_tail: false,
        audit: read_optional(&dir.join(chaos_history::AUDIT_FILE)).unwrap(),
        final_state: read_optional(&dir.join(chaos_history::FINAL_STATE_FILE)).unwrap(),
    }
}

/// Every way of cutting the file agrees with the in-memory check.
fn agrees(path: &Path, record: &RunRecord, torn: bool) {
    let want = in_memory(record, torn);
    for (chunk, decoders) in [(1, 1), (7, 3), (200, 2), (4096, 1), (CHUNK, 4)] {
        let got = streamed(path, record, chunk, decoders)
            .unwrap_or_else(|e| panic!("{} in chunks of {chunk}: {e}", path.display()));
        assert_eq!(
            got.verdict,
            want.verdict,
            "{} in chunks of {chunk}",
            path.display()
        );
        assert_eq!(got.torn, want.torn, "{}: torn tail", path.display());
        assert_eq!(
            got.story,
            want.story,
            "{} in chunks of {chunk}",
            path.display()
        );
        assert!(
            got.page == want.page,
            "{} in chunks of {chunk}: the pages differ",
            path.display()
        );
    }
}

const CHUNK: usize = 4 << 20;

#[test]
fn every_planted_run_judges_tells_and_draws_as_in_memory() {
    for dir in cases() {
        let path = dir.join(chaos_history::HISTORY_FILE);
        if !path.is_file() {
            continue;
        }
        let mut reader = chaos_history::HistoryReader::open(&path).unwrap();
        let history: Vec<Op> = (&mut reader).map(Result::unwrap).collect();
        let torn = reader.torn_tail;
        agrees(&path, &record_of(&dir, history), torn);
    }
}

const GOOD: &str = r#"{"index":0,"time_ns":1,"scenario_time":"21:40:00.0","process":"ingest","type":"ok","f":"ingest","value":{"shard":"shard1","ts_ms":5,"turbines":["AP-0001","AP-é"]}}"#;
const OTHER: &str = r#"{"index":1,"time_ns":2,"scenario_time":"21:40:00.0","process":"box-1","type":"fail","f":"copy","value":{"reason":"fenced","token":3}}"#;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(format!("{}.jsonl", name.replace(' ', "-")));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn planted() -> RunRecord {
    record_of(&cases()[0], Vec::new())
}

fn ops(lines: &[&str]) -> Vec<Op> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn blank_lines_crlf_and_a_missing_final_newline_read_as_lines() {
    let dir = temp("odd");
    let mut record = planted();
    record.history = ops(&[GOOD, OTHER]);
    for (name, text) in [
        (
            "blank lines and CRLF",
            format!("\n{GOOD}\r\n\n  \n{OTHER}\n\n"),
        ),
        ("no final newline", format!("{GOOD}\n{OTHER}")),
    ] {
        agrees(&write(&dir, name, text.as_bytes()), &record, false);
    }
    record.history = Vec::new();
    agrees(&write(&dir, "empty", b""), &record, false);
    agrees(
        &write(&dir, "only blank lines", b"\n \n\r\n"),
        &record,
        false,
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn only_the_last_line_may_be_torn() {
    let dir = temp("torn");
    let mut record = planted();
    record.history = ops(&[GOOD, OTHER]);
    let torn = &GOOD[..GOOD.len() - 9];
    for text in [
        format!("{GOOD}\n{OTHER}\n{torn}"),
        format!("{GOOD}\n{OTHER}\n{torn}\n"),
        format!("{GOOD}\n{OTHER}\n{torn}\n\n  \n"),
    ] {
        agrees(
            &write(&dir, "torn last line", text.as_bytes()),
            &record,
            true,
        );
    }
    // Any cut of a line, as the last one, is a torn tail (or the whole event).
    for cut in 1..OTHER.len() {
        let path = write(&dir, "cut", format!("{GOOD}\n{}", &OTHER[..cut]).as_bytes());
        let got = streamed(&path, &record, CHUNK, 2).unwrap();
        assert!(got.torn, "cut at {cut}");
    }
    // A character cut in two at the end of the file too.
    let mut bytes = format!("{GOOD}\n{OTHER}\n").into_bytes();
    bytes.extend_from_slice(&GOOD.as_bytes()[..GOOD.find('é').unwrap() + 1]);
    let got = streamed(&write(&dir, "cut character", &bytes), &record, 64, 2).unwrap();
    assert!(got.torn);
    assert_eq!(got.verdict, in_memory(&record, true).verdict);

    // A torn line anywhere else is refused, naming its line.
    let path = write(
        &dir,
        "torn then more",
        format!("{GOOD}\n{torn}\n{OTHER}\n").as_bytes(),
    );
    for chunk in [1, 50, CHUNK] {
        let e = streamed(&path, &record, chunk, 2).unwrap_err();
        assert!(
            e.starts_with(&format!("{}:2: cut short", path.display())),
            "{e}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_line_or_byte_is_refused_naming_its_line() {
    let dir = temp("bad");
    let record = planted();
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "a bad line",
            format!("{GOOD}\n\n{OTHER}\n[1, 2]\n{GOOD}\n").into_bytes(),
            ":4: not a history event (column ".into(),
        ),
        (
            "garbage last line",
            format!("{GOOD}\n{OTHER}\nxyz\n").into_bytes(),
            ":3: not a history event (column 1): expected value".into(),
        ),
        (
            "not UTF-8",
            [
                format!("{GOOD}\n{OTHER}\n").into_bytes(),
                b"{\"a\": \"\xff\"}\n".to_vec(),
                GOOD.as_bytes().to_vec(),
            ]
            .concat(),
            ":3: not UTF-8 text (byte 8 of the line)".into(),
        ),
        (
            "torn before not UTF-8",
            [
                format!("{GOOD}\n{}\n", &GOOD[..30]).into_bytes(),
                b"\xff\n".to_vec(),
            ]
            .concat(),
            ":2: cut short".into(),
        ),
        (
            "not UTF-8 in the last line",
            [
                format!("{GOOD}\n").into_bytes(),
                b"{\"a\": \"\xff\"".to_vec(),
            ]
            .concat(),
            ":2: not UTF-8 text (byte 8 of the line)".into(),
        ),
    ];
    for (name, bytes, want) in cases {
        let path = write(&dir, name, &bytes);
        for chunk in [1, 40, CHUNK] {
            let e = streamed(&path, &record, chunk, 3).unwrap_err();
            let want = format!("{}{want}", path.display());
            assert!(
                e.starts_with(&want),
                "{name} in chunks of {chunk}: {e}\nwanted {want}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The fast road (a known list replaced by a number) never changes what is judged:
/// lists that change, repeat, nest or hide in strings fold as `observe` folds them.
#[test]
fn turbine_lists_fold_the_same_on_the_fast_road() {
    let dir = temp("lists");
    let mut record = planted();
    let line = |i: u64, kind: &str, value: &str| {
        format!(
            r#"{{"index":{i},"time_ns":{},"scenario_time":"21:40:00.0","process":"ingest","type":"{kind}","f":"ingest","value":{value}}}"#,
            i * 1000
        )
    };
    let a = r#"["AP-0001","AP-0004"]"#;
    let b = r#"["AP-0004","AP-0001"]"#;
    let mut lines = Vec::new();
    for (i, value) in [
        format!(r#"{{"shard":"shard1","ts_ms":1000,"turbines":{a}}}"#),
        format!(r#"{{"shard":"shard1","ts_ms":3000,"turbines":{a}}}"#),
        format!(r#"{{"shard":"shard2","ts_ms":3000,"turbines":{a}}}"#),
        format!(r#"{{"shard":"shard1","ts_ms":5000,"turbines":{b}}}"#),
        // The known list nested, the real one after it.
        format!(r#"{{"x":{{"turbines":{a}}},"shard":"shard1","ts_ms":7000,"turbines":{b}}}"#),
        // The known list, then a second `turbines` (the last one counts).
        format!(r#"{{"shard":"shard1","ts_ms":9000,"turbines":{a},"turbines":["AP-0007"]}}"#),
        // The list's text inside a string.
        format!(
            r#"{{"note":"\"turbines\":{}","shard":"shard1","ts_ms":11000,"turbines":{a}}}"#,
            a.replace('"', "\\\"")
        ),
        format!(r#"{{"shard":"shard1","ts_ms":13000,"turbines":{a},"reason":"fenced","token":4}}"#),
        format!(r#"{{"shard":7,"ts_ms":15000,"turbines":{a}}}"#),
        format!(r#"{{"shard":"shard1","ts_ms":17.5,"turbines":{a}}}"#),
        format!(r#"{{"shard":"shard1","ts_ms":19000,"turbines":[1,"AP-0001"]}}"#),
        format!(r#"{{"shard":"shard1","ts_ms":21000,"turbines":{a} }}"#),
    ]
    .iter()
    .enumerate()
    {
        for kind in ["invoke", "ok", "info", "fail"] {
            lines.push(line(i as u64 * 4, kind, value));
        }
    }
    let text = lines.join("\n");
    record.history = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    agrees(&write(&dir, "lists", text.as_bytes()), &record, false);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The story tells a mover's exit, the supervisor's restart and a triggered fault from the
/// streamed events as from those in memory: the fields it reads (`code`, `after_exit`,
/// `when`, `by`) survive the fast decoder.
#[test]
fn exits_restarts_and_triggers_are_told_from_the_stream() {
    let dir = temp("told");
    let lines = [
        r#"{"index":0,"time_ns":1000,"scenario_time":"","process":"box-2","type":"ok","f":"acquire","value":{"token":7}}"#,
        r#"{"index":1,"time_ns":2000,"scenario_time":"","process":"nemesis","type":"info","f":"trigger","value":{"by":"box-2","fault":0,"no_target":null,"target":"box-2","when":"the 7th write by holder, after its commit"}}"#,
        r#"{"index":2,"time_ns":3000,"scenario_time":"","process":"box-2","type":"info","f":"exit","value":{"code":1}}"#,
        r#"{"index":3,"time_ns":4000,"scenario_time":"","process":"harness","type":"ok","f":"restart","value":{"after_exit":1,"delay_real_ms":50,"target":"box-2"}}"#,
        r#"{"index":4,"time_ns":5000,"scenario_time":"","process":"harness","type":"ok","f":"restart","value":{"after_exit":null,"delay_real_ms":50,"target":"box-3"}}"#,
        r#"{"index":5,"time_ns":6000,"scenario_time":"","process":"nemesis","type":"info","f":"trigger-unfired","value":{"fault":1,"optional":true,"when":"the 2nd grant by box-4"}}"#,
    ];
    let path = write(&dir, "told", (lines.join("\n") + "\n").as_bytes());
    let record = record_of(&cases()[0], ops(&lines));
    let story = streamed(&path, &record, 4096, 2).unwrap().story;
    for needle in [
        "trigger: the 7th write by holder, after its commit (box-2) comes; it sets off the fault on box-2",
        "box-2 exits with code 1",
        "harness restarts box-2 (it had exited with code 1)",
        "harness restarts box-3 (it had died of a signal)",
        "the trigger on the 2nd grant by box-4 never fired",
    ] {
        assert!(story.contains(needle), "{needle}:\n{story}");
    }
    agrees(&path, &record, false);
}
