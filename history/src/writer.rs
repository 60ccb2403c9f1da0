//! The history writer: any number of writers, one monotonic index, each line flushed as it happens.

use crate::{HistoryError, Op, OpType, ScenarioClock};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Appends events to `history.jsonl`. Cloning shares the file and the index.
#[derive(Clone)]
pub struct HistoryWriter {
    inner: Arc<Mutex<Inner>>,
    started: Instant,
    clock: ScenarioClock,
}

struct Inner {
    out: BufWriter<File>,
    next_index: u64,
    path: PathBuf,
    /// Events written; a limit keeps a runaway writer from filling the disk.
    written: u64,
    limit: u64,
    dropped: u64,
}

impl HistoryWriter {
    /// Create (truncate) the file. `started` is the run's monotonic origin.
    pub fn create(
        path: &Path,
        started: Instant,
        clock: ScenarioClock,
        limit: u64,
    ) -> Result<HistoryWriter, HistoryError> {
        let file = File::create(path).map_err(|error| HistoryError::Io {
            path: path.display().to_string(),
            error,
        })?;
        Ok(HistoryWriter {
            inner: Arc::new(Mutex::new(Inner {
                out: BufWriter::new(file),
                next_index: 0,
                path: path.to_path_buf(),
                written: 0,
                limit,
                dropped: 0,
            })),
            started,
            clock,
        })
    }

    pub fn clock(&self) -> ScenarioClock {
        self.clock
    }

    /// Monotonic ns since the run started.
    pub fn now_ns(&self) -> i64 {
        self.started.elapsed().as_nanos() as i64
    }

    /// Scenario ms now.
    pub fn now_scenario_ms(&self) -> i64 {
        self.clock.scenario_ms_at_run_ns(self.now_ns())
    }

    /// Append one event stamped now; returns it as written (with its index).
    pub fn record(&self, process: &str, kind: OpType, f: &str, value: serde_json::Value) -> Op {
        let time_ns = self.now_ns();
        self.record_at(time_ns, process, kind, f, value)
    }

    /// Append one event with a given monotonic time (for lines read from a child's stdout).
    pub fn record_at(
        &self,
        time_ns: i64,
        process: &str,
        kind: OpType,
        f: &str,
        value: serde_json::Value,
    ) -> Op {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let op = Op {
            index: inner.next_index,
            time_ns,
            scenario_time: ScenarioClock::format(self.clock.scenario_ms_at_run_ns(time_ns)),
            process: process.to_string(),
            kind,
            f: f.to_string(),
            value,
        };
        if inner.written >= inner.limit {
            inner.dropped += 1;
            return op;
        }
        inner.next_index += 1;
        inner.written += 1;
        // A failed write is reported at `finish`; the run goes on.
        if serde_json::to_writer(&mut inner.out, &op).is_ok() {
            let _ = inner.out.write_all(b"\n");
            let _ = inner.out.flush();
        }
        op
    }

    /// Flush and report how many events were written and dropped over the limit.
    pub fn finish(&self) -> Result<(u64, u64), HistoryError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let path = inner.path.display().to_string();
        inner
            .out
            .flush()
            .map_err(|error| HistoryError::Io { path, error })?;
        Ok((inner.written, inner.dropped))
    }
}
