//! Reads `history.jsonl` back, one event at a time, so a checker can fold 10 M events without holding them.

use crate::{HistoryError, Op};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Streams events from a history file. A torn last line (the harness was
/// killed mid-write) is reported by `torn_tail`, not as an error.
pub struct HistoryReader {
    lines: std::io::Lines<BufReader<File>>,
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
            lines: BufReader::with_capacity(1 << 20, file).lines(),
            path: path.display().to_string(),
            line: 0,
            torn_tail: false,
        })
    }
}

impl Iterator for HistoryReader {
    type Item = Result<Op, HistoryError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let text = match self.lines.next()? {
                Ok(t) => t,
                Err(error) => {
                    return Some(Err(HistoryError::Io {
                        path: self.path.clone(),
                        error,
                    }))
                }
            };
            self.line += 1;
            if text.trim().is_empty() {
                continue;
            }
            return match serde_json::from_str::<Op>(&text) {
                Ok(op) => Some(Ok(op)),
                Err(error) => {
                    // Only the last line may be torn; peek whether more follow.
                    if error.is_eof() {
                        self.torn_tail = true;
                        None
                    } else {
                        Some(Err(HistoryError::Parse {
                            path: self.path.clone(),
                            line: self.line,
                            error,
                        }))
                    }
                }
            };
        }
    }
}

/// Read a whole history into memory (small runs, tests).
pub fn read_history(path: &Path) -> Result<Vec<Op>, HistoryError> {
    HistoryReader::open(path)?.collect()
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
