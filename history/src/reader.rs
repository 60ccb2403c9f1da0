//! Reads `history.jsonl` back, one event at a time, so a checker can fold 10 M events without holding them.

use crate::{HistoryError, Op};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Streams events from a history file. A torn last line (the harness was
/// killed mid-write: its JSON ends early, or a character is cut in two) is
/// reported by `torn_tail`, not as an error; only the last line may be torn.
pub struct HistoryReader {
    file: BufReader<File>,
    path: String,
    line: u64,
    pub torn_tail: bool,
}

impl HistoryReader {
    pub fn open(path: &Path) -> Result<HistoryReader, HistoryError> {
        let file = File::open(path).map_err(|error| HistoryError::Io {
            path: path.display().to_string(),
            error,
        })?;
        Ok(HistoryReader {
            file: BufReader::with_capacity(1 << 20, file),
            path: path.display().to_string(),
            line: 0,
            torn_tail: false,
        })
    }

    /// The next line's bytes, without its newline; `None` at the end.
    fn next_line(&mut self) -> Option<Result<Vec<u8>, HistoryError>> {
        let mut bytes = Vec::new();
        match self.file.read_until(b'\n', &mut bytes) {
            Ok(0) => None,
            Ok(_) => {
                self.line += 1;
                if bytes.last() == Some(&b'\n') {
                    bytes.pop();
                }
                Some(Ok(bytes))
            }
            Err(error) => Some(Err(HistoryError::Io {
                path: self.path.clone(),
                error,
            })),
        }
    }

    /// Whether only blank lines follow (a torn line must be the last).
    fn rest_is_blank(&mut self) -> Result<bool, HistoryError> {
        while let Some(next) = self.next_line() {
            if !next?.iter().all(u8::is_ascii_whitespace) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One line as an event, else whether it was cut short (its JSON ends early, or its last
    /// character is cut in two) and what is wrong with it.
    fn parse(bytes: &[u8]) -> Result<Op, (bool, serde_json::Error)> {
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                let error = <serde_json::Error as serde::de::Error>::custom(format!(
                    "not UTF-8 at byte {}",
                    e.valid_up_to()
                ));
                return Err((e.error_len().is_none(), error));
            }
        };
        serde_json::from_str::<Op>(text).map_err(|e| (e.is_eof(), e))
    }
}

impl Iterator for HistoryReader {
    type Item = Result<Op, HistoryError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let bytes = match self.next_line()? {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return match Self::parse(&bytes) {
                Ok(op) => Some(Ok(op)),
                Err((torn, error)) => {
                    let line = self.line;
                    match torn {
                        true => match self.rest_is_blank() {
                            Ok(true) => {
                                self.torn_tail = true;
                                None
                            }
                            Ok(false) => Some(Err(HistoryError::Parse {
                                path: self.path.clone(),
                                line,
                                error,
                            })),
                            Err(e) => Some(Err(e)),
                        },
                        false => Some(Err(HistoryError::Parse {
                            path: self.path.clone(),
                            line,
                            error,
                        })),
                    }
                }
            };
        }
    }
}

/// Read a whole history into memory (small runs, tests). A torn last line is dropped
/// silently: [`History::read`] says so.
pub fn read_history(path: &Path) -> Result<Vec<Op>, HistoryError> {
    HistoryReader::open(path)?.collect()
}

/// A whole history read back: its events as the file holds them, and whether its last
/// line was torn (the harness stopped mid-write), which a checker must say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub ops: Vec<Op>,
    pub torn_tail: bool,
}

impl History {
    /// Read `path` whole, keeping the torn-tail flag.
    pub fn read(path: &Path) -> Result<History, HistoryError> {
        let mut reader = HistoryReader::open(path)?;
        let ops = reader.by_ref().collect::<Result<Vec<Op>, _>>()?;
        Ok(History {
            ops,
            torn_tail: reader.torn_tail,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HistoryWriter, OpType, ScenarioClock};
    use std::time::Instant;

    #[test]
    fn writers_share_one_index_and_lines_read_back() {
        let dir = std::env::temp_dir().join(format!("chaos-history-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let clock = ScenarioClock {
            start_unix_ns: 0,
            start_scenario_ms: 78_000_000,
            real_ns_per_scenario_s: 10_000_000,
            scenario_day_unix_ms: 0,
            wall_check_run_ns: 0,
            wall_check_unix_ns: 0,
        };
        let w = HistoryWriter::create(&path, Instant::now(), clock, 1_000).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        w.record(
                            &format!("box-{t}"),
                            OpType::Invoke,
                            "copy",
                            serde_json::json!({ "i": i }),
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        w.finish().unwrap();
        let ops = read_history(&path).unwrap();
        let mut idx: Vec<u64> = ops.iter().map(|o| o.index).collect();
        idx.sort();
        assert_eq!(idx, (0..200).collect::<Vec<_>>());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 31: the failover path read through `read_history`, which dropped the torn flag;
    /// `History::read` keeps it, also for a character cut in two, and only for the last line.
    #[test]
    fn a_torn_tail_is_kept_and_only_the_last_line_may_be_torn() {
        let dir = std::env::temp_dir().join(format!("chaos-history-torn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let good = r#"{"index":0,"time_ns":0,"scenario_time":"","process":"app","type":"invoke","f":"order","value":{"id":"o-1"}}"#;
        let cut = &good[..good.len() - 9];
        let read = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            History::read(&path)
        };
        for tail in [cut.to_string(), format!("{cut}\n\n  \n")] {
            let h = read(format!("{good}\n{tail}").as_bytes()).unwrap();
            assert_eq!((h.ops.len(), h.torn_tail), (1, true), "{tail:?}");
        }
        // A character cut in two at the very end (the é of a value).
        let mut bytes = format!("{good}\n{}", &good[..40]).into_bytes();
        bytes.extend_from_slice(&"é".as_bytes()[..1]);
        assert!(read(&bytes).unwrap().torn_tail);
        let whole = read(format!("{good}\n{good}\n").as_bytes()).unwrap();
        assert_eq!((whole.ops.len(), whole.torn_tail), (2, false));
        // Cut short, then more lines: not a torn tail but a bad line, named.
        let err = read(format!("{good}\n{cut}\n{good}\n").as_bytes()).unwrap_err();
        assert!(err.to_string().contains("history.jsonl:2: "), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_limit_drops_and_counts() {
        let dir = std::env::temp_dir().join(format!("chaos-history-limit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        let clock = ScenarioClock {
            start_unix_ns: 0,
            start_scenario_ms: 0,
            real_ns_per_scenario_s: 10_000_000,
            scenario_day_unix_ms: 0,
            wall_check_run_ns: 0,
            wall_check_unix_ns: 0,
        };
        let w = HistoryWriter::create(&path, Instant::now(), clock, 3).unwrap();
        for _ in 0..5 {
            w.record("ingest", OpType::Ok, "ingest", serde_json::Value::Null);
        }
        assert_eq!(w.finish().unwrap(), (3, 2));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
