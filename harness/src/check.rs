//! `chaos check DIR`: judge a stored run with no database: read the history (decoded into events on every core for the report and the story, folded for the verdict straight from its text by `HistoryFold::observe_line` meanwhile), write `verdict.json` and `report.html`, print a summary.

use crate::results;
use chaos_checkers::{HistoryFold, Verdict};
use chaos_history::{Audit, FinalState, HistoryError, Op, RunMeta, RunRecord, ScenarioClock};
use std::path::Path;

/// Check the run in `dir`; writes verdict.json and report.html there.
pub fn check_dir(
    dir: &Path,
    extra: Option<&serde_json::Value>,
    quiet: bool,
) -> anyhow::Result<Verdict> {
    if !dir.join(chaos_history::RUN_META_FILE).is_file() {
        anyhow::bail!(
            "{}: not a run directory (no {}); runs are under results/<scenario>/",
            dir.display(),
            chaos_history::RUN_META_FILE
        );
    }
    let meta: RunMeta = results::read_json(&dir.join(chaos_history::RUN_META_FILE))?;
    let audit: Option<Audit> = results::read_json(&dir.join(chaos_history::AUDIT_FILE)).ok();
    let final_state: Option<FinalState> =
        results::read_json(&dir.join(chaos_history::FINAL_STATE_FILE)).ok();
    let loaded = load_history(&dir.join(chaos_history::HISTORY_FILE), &meta)?;
    let mut meta = meta;
    if loaded.torn_tail && meta.completed {
        meta.completed = false;
        meta.incomplete_reason =
            Some("the history's last line is torn: the harness stopped mid-write".into());
    }
    let record = RunRecord {
        meta,
        history: loaded.ops,
        audit,
        final_state,
    };
    let verdict = match loaded.fold {
        Some(fold) => fold.finish(
            &record.meta,
            record.audit.as_ref(),
            record.final_state.as_ref(),
        ),
        None => chaos_checkers::check(&record),
    };
    results::write_json(&dir.join("verdict.json"), &verdict)?;
    let stored_extra: serde_json::Value = extra
        .cloned()
        .or_else(|| results::read_json(&dir.join("figures.json")).ok())
        .unwrap_or(serde_json::Value::Null);
    let html = chaos_report::render(&chaos_report::ReportInput {
        meta: &record.meta,
        history: &record.history,
        audit: record.audit.as_ref(),
        verdict: &verdict,
        extra: Some(&stored_extra),
    });
    std::fs::write(dir.join("report.html"), html)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.join("report.html").display()))?;
    if !quiet {
        eprintln!("{}", crate::story::story(&record, &verdict));
        eprintln!("{}", verdict.summary(&record.meta.clock));
        eprintln!("report: {}", dir.join("report.html").display());
    }
    let _ = ScenarioClock::format(0);
    // Freeing a history of a million events takes seconds: a thread does it
    // while the caller goes on (and `chaos check` exits without waiting).
    std::thread::spawn(move || drop(record));
    Ok(verdict)
}

/// The history of a run directory: its events for the report and the story,
/// whether the last line was torn, and the verdict's fold of the same lines
/// (`None` when the fold and the decode disagreed on where the history ends:
/// then the verdict is taken from the events, as `chaos_checkers::check`).
pub struct LoadedHistory {
    pub ops: Vec<Op>,
    pub torn_tail: bool,
    pub fold: Option<HistoryFold>,
}

/// The history is read this much at a time (then to the end of a line), so
/// its text is never held whole beside its events.
const CHUNK_BYTES: u64 = 64 << 20;
/// Below this size a chunk is decoded on one thread (the April run is 13 MB).
const BYTES_PER_DECODER: usize = 4 << 20;

/// Read `history.jsonl` as `HistoryReader` does (blank lines skipped, the
/// first line cut short ends the history as a torn tail, any other bad line
/// is an error naming it), a chunk at a time: each chunk is decoded into
/// `Op`s on up to every core while this thread folds the same lines from
/// text with `observe_line`.
pub fn load_history(path: &Path, meta: &RunMeta) -> Result<LoadedHistory, HistoryError> {
    load_history_in(path, meta, CHUNK_BYTES, BYTES_PER_DECODER)
}

fn load_history_in(
    path: &Path,
    meta: &RunMeta,
    chunk_bytes: u64,
    bytes_per_decoder: usize,
) -> Result<LoadedHistory, HistoryError> {
    use std::io::{BufRead, Read};
    let io = |source| HistoryError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut reader =
        std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path).map_err(io)?);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let mut fold = HistoryFold::new(meta);
    let (mut folded, mut fold_stopped) = (0usize, false);
    let mut ops = Vec::new();
    let mut lines_before = 0u64;
    let mut torn_tail = false;
    'chunks: loop {
        let mut bytes = Vec::new();
        (&mut reader)
            .take(chunk_bytes)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        reader.read_until(b'\n', &mut bytes).map_err(io)?;
        if bytes.is_empty() {
            break;
        }
        // Lines before one that is not UTF-8 are read; that line is the error, as with `BufRead::lines`.
        let (text, bad_line) = match String::from_utf8(bytes) {
            Ok(text) => (text, None),
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                let mut bytes = e.into_bytes();
                bytes.truncate(
                    bytes[..valid]
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |i| i + 1),
                );
                let bad = std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "stream did not contain valid UTF-8",
                );
                (
                    String::from_utf8(bytes).expect("valid up to this line"),
                    Some(bad),
                )
            }
        };
        let parts = split_at_lines(&text, cores.min(1 + text.len() / bytes_per_decoder));
        let decoded: Vec<DecodedPart> = std::thread::scope(|s| {
            let decoders: Vec<_> = parts
                .iter()
                .map(|part| s.spawn(move || decode_part(part)))
                .collect();
            if !fold_stopped {
                for line in text.lines() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    if fold.observe_line(line).is_err() {
                        fold_stopped = true;
                        break;
                    }
                    folded += 1;
                }
            }
            decoders
                .into_iter()
                .map(|d| d.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for part in decoded {
            ops.extend(part.ops);
            match part.end {
                PartEnd::Done => lines_before += part.lines,
                PartEnd::Torn => {
                    torn_tail = true;
                    break 'chunks;
                }
                PartEnd::Bad(source) => {
                    return Err(HistoryError::Parse {
                        path: path.display().to_string(),
                        line: lines_before + part.lines,
                        source,
                    })
                }
            }
        }
        if let Some(bad) = bad_line {
            return Err(io(bad));
        }
    }
    let fold = (folded == ops.len()).then_some(fold);
    Ok(LoadedHistory {
        ops,
        torn_tail,
        fold,
    })
}

/// `text` in up to `n` pieces, each ending just after a newline (the last at the end).
fn split_at_lines(text: &str, n: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..n.max(1) {
        // Bytes, not chars: the cut may fall inside a character; a newline never does.
        let mut cut = (text.len() * i / n).max(start);
        match text.as_bytes()[cut..].iter().position(|&b| b == b'\n') {
            Some(at) => cut += at + 1,
            None => break,
        }
        if cut > start {
            parts.push(&text[start..cut]);
            start = cut;
        }
    }
    parts.push(&text[start..]);
    parts
}

enum PartEnd {
    /// Every line decoded.
    Done,
    /// A line was cut short: the history ends before it.
    Torn,
    /// A line is not a history event: the whole read fails, naming it.
    Bad(serde_json::Error),
}

struct DecodedPart {
    ops: Vec<Op>,
    /// Lines read, blank ones included; with `Bad`, up to the bad one.
    lines: u64,
    end: PartEnd,
}

fn decode_part(text: &str) -> DecodedPart {
    let mut ops = Vec::new();
    let mut lines = 0;
    for line in text.lines() {
        lines += 1;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Op>(line) {
            Ok(op) => ops.push(op),
            Err(e) => {
                let end = if e.is_eof() {
                    PartEnd::Torn
                } else {
                    PartEnd::Bad(e)
                };
                return DecodedPart { ops, lines, end };
            }
        }
    }
    DecodedPart {
        ops,
        lines,
        end: PartEnd::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chaos_history::HistoryReader;
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
            .collect();
        dirs.sort();
        assert!(dirs.len() >= 20, "the planted runs are missing");
        dirs
    }

    /// What `HistoryReader` makes of a file: the events and the torn tail, or the error's text.
    fn by_reader(path: &Path) -> Result<(Vec<Op>, bool), String> {
        let mut reader = HistoryReader::open(path).map_err(|e| e.to_string())?;
        let mut ops = Vec::new();
        for op in &mut reader {
            ops.push(op.map_err(|e| e.to_string())?);
        }
        Ok((ops, reader.torn_tail))
    }

    /// `load_history` against `HistoryReader` and `check`, in chunks and pieces of every size from tiny to whole.
    fn agrees(path: &Path, meta: &RunMeta, record: Option<&RunRecord>) {
        let want = by_reader(path);
        for (chunk, per_decoder) in [
            (1, 1),
            (7, 3),
            (200, 64),
            (4096, 512),
            (CHUNK_BYTES, BYTES_PER_DECODER),
        ] {
            let got = load_history_in(path, meta, chunk, per_decoder);
            let got = got
                .map(|l| (l.ops, l.torn_tail, l.fold))
                .map_err(|e| e.to_string());
            match (&want, got) {
                (Ok((ops, torn)), Ok((got_ops, got_torn, fold))) => {
                    assert_eq!(&got_ops, ops, "{} in chunks of {chunk}", path.display());
                    assert_eq!(got_torn, *torn, "{}: torn tail", path.display());
                    let fold = fold.expect("the fold saw the lines the decoder did");
                    if let Some(record) = record {
                        let verdict = fold.finish(
                            &record.meta,
                            record.audit.as_ref(),
                            record.final_state.as_ref(),
                        );
                        assert_eq!(verdict, chaos_checkers::check(record), "{}", path.display());
                    }
                }
                (Err(want), Err(got)) => assert_eq!(&got, want, "{}", path.display()),
                (want, got) => panic!(
                    "{} in chunks of {chunk}: HistoryReader {:?}, load_history {:?}",
                    path.display(),
                    want.as_ref().map(|(o, t)| (o.len(), *t)),
                    got.map(|(o, t, _)| (o.len(), t))
                ),
            }
        }
    }

    #[test]
    fn every_planted_run_loads_and_judges_as_before() {
        for dir in cases() {
            let meta: RunMeta = results::read_json(&dir.join("run.json")).unwrap();
            let path = dir.join(chaos_history::HISTORY_FILE);
            if !path.is_file() {
                continue;
            }
            let (history, torn) = by_reader(&path).unwrap();
            let mut meta2 = meta.clone();
            if torn && meta2.completed {
                meta2.completed = false;
            }
            let record = RunRecord {
                meta: meta2,
                history,
                audit: results::read_json(&dir.join(chaos_history::AUDIT_FILE)).ok(),
                final_state: results::read_json(&dir.join(chaos_history::FINAL_STATE_FILE)).ok(),
            };
            agrees(&path, &meta, Some(&record));
        }
    }

    #[test]
    fn odd_files_read_as_history_reader_reads_them() {
        let dir = temp("odd");
        let meta: RunMeta = results::read_json(&cases()[0].join("run.json")).unwrap();
        let good = r#"{"index":0,"time_ns":1,"scenario_time":"21:40:00.0","process":"ingest","type":"ok","f":"ingest","value":{"shard":"shard1","ts_ms":5,"turbines":["AP-0001","AP-é"]}}"#;
        let other = r#"{"index":1,"time_ns":2,"scenario_time":"21:40:00.0","process":"box-1","type":"fail","f":"copy","value":{"reason":"fenced","token":3}}"#;
        let torn = &good[..good.len() - 9];
        let files: Vec<(&str, Vec<u8>)> = vec![
            ("empty", b"".to_vec()),
            (
                "blank lines and CRLF",
                format!("\n{good}\r\n\n  \n{other}\n\n").into_bytes(),
            ),
            ("no final newline", format!("{good}\n{other}").into_bytes()),
            (
                "torn last line",
                format!("{good}\n{other}\n{torn}").into_bytes(),
            ),
            (
                "torn line then more",
                format!("{good}\n{torn}\n{other}\n{good}\n").into_bytes(),
            ),
            (
                "a bad line",
                format!("{good}\n\n{other}\n[1, 2]\n{good}\n").into_bytes(),
            ),
            (
                "not UTF-8",
                [
                    format!("{good}\n{other}\n").into_bytes(),
                    b"{\"a\": \"\xff\"}\n".to_vec(),
                    good.as_bytes().to_vec(),
                ]
                .concat(),
            ),
            (
                "torn before not UTF-8",
                [format!("{good}\n{torn}\n").into_bytes(), b"\xff\n".to_vec()].concat(),
            ),
        ];
        for (name, bytes) in files {
            let path = dir.join(format!("{}.jsonl", name.replace(' ', "-")));
            std::fs::write(&path, bytes).unwrap();
            agrees(&path, &meta, None);
        }
        let missing = load_history(&dir.join("missing.jsonl"), &meta)
            .err()
            .unwrap();
        assert_eq!(
            missing.to_string(),
            HistoryReader::open(&dir.join("missing.jsonl"))
                .err()
                .unwrap()
                .to_string()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pieces_end_at_newlines_and_cover_the_text() {
        let text = "aé\nbb\n\nccc\ndd";
        for n in 1..8 {
            let parts = split_at_lines(text, n);
            assert_eq!(parts.concat(), text);
            assert!(
                parts[..parts.len() - 1].iter().all(|p| p.ends_with('\n')),
                "{parts:?}"
            );
        }
    }
}
