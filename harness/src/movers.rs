//! The movers under test: spawned per box, their stdout read into the history, signalled by the nemesis, reaped on every path.

use crate::backend::process::ProcessMover;
use crate::backend::MoverSpec;
use crate::progress::Progress;
use chaos_history::{HistoryWriter, OpType};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

/// Every box's mover: specs to (re)start them, pids to signal them, a count of those running.
pub struct Movers {
    specs: BTreeMap<String, MoverSpec>,
    pids: Mutex<BTreeMap<String, i32>>,
    running: AtomicUsize,
    /// Kills whose restart has not happened yet: the run is not over while any is pending.
    pub pending_restarts: AtomicUsize,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    history: HistoryWriter,
    progress: Arc<Progress>,
    exits: Mutex<BTreeMap<String, Option<i32>>>,
    log_dir: std::path::PathBuf,
}

impl Movers {
    pub fn new(
        specs: Vec<MoverSpec>,
        history: HistoryWriter,
        progress: Arc<Progress>,
        log_dir: std::path::PathBuf,
    ) -> Arc<Movers> {
        Arc::new(Movers {
            log_dir,
            specs: specs.into_iter().map(|s| (s.box_name.clone(), s)).collect(),
            pids: Mutex::new(BTreeMap::new()),
            running: AtomicUsize::new(0),
            pending_restarts: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
            history,
            progress,
            exits: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn log_dir(&self) -> std::path::PathBuf {
        self.log_dir.clone()
    }

    pub fn boxes(&self) -> Vec<String> {
        self.specs.keys().cloned().collect()
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Exit codes of every mover that exited (None: killed by a signal).
    pub fn exits(&self) -> BTreeMap<String, Option<i32>> {
        self.exits.lock().unwrap().clone()
    }

    /// Start one box's mover and the tasks that read its output and reap it.
    pub fn spawn(self: &Arc<Self>, box_name: &str) -> anyhow::Result<()> {
        let spec = self
            .specs
            .get(box_name)
            .ok_or_else(|| anyhow::anyhow!("unknown box {box_name}"))?;
        if self.pids.lock().unwrap().contains_key(box_name) {
            anyhow::bail!("{box_name} is already running");
        }
        let (mut mover, stdout) = ProcessMover::spawn(spec)?;
        self.pids
            .lock()
            .unwrap()
            .insert(box_name.to_string(), mover.pid);
        self.running.fetch_add(1, Ordering::SeqCst);
        let me = Arc::clone(self);
        let name = box_name.to_string();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let log_path = me.specs[&name].log_path.clone();
            while let Ok(Some(line)) = lines.next_line().await {
                me.take_line(&name, &line, &log_path);
            }
            let code = mover.wait().await;
            me.pids.lock().unwrap().remove(&name);
            me.exits.lock().unwrap().insert(name.clone(), code);
            me.history
                .record(&name, OpType::Info, "exit", json!({ "code": code }));
            me.running.fetch_sub(1, Ordering::SeqCst);
        });
        self.tasks.lock().unwrap().push(reader);
        Ok(())
    }

    /// A history line from a mover: `{"type","f","value"}`; anything else goes to its log.
    fn take_line(&self, box_name: &str, line: &str, log_path: &std::path::Path) {
        let parsed: Option<(OpType, String, serde_json::Value)> =
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| {
                    let kind: OpType = serde_json::from_value(v.get("type")?.clone()).ok()?;
                    let f = v.get("f")?.as_str()?.to_string();
                    Some((
                        kind,
                        f,
                        v.get("value").cloned().unwrap_or(serde_json::Value::Null),
                    ))
                });
        match parsed {
            Some((kind, f, value)) => {
                self.progress.observe(box_name, kind, &f, &value);
                self.history.record(box_name, kind, &f, value);
            }
            None => {
                use std::io::Write;
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(log_path)
                {
                    let _ = writeln!(f, "[stdout] {line}");
                }
            }
        }
    }

    pub fn pid(&self, box_name: &str) -> Option<i32> {
        self.pids.lock().unwrap().get(box_name).copied()
    }

    /// Signal a box's process group.
    pub fn signal(&self, box_name: &str, sig: i32) -> anyhow::Result<()> {
        let pid = self
            .pid(box_name)
            .ok_or_else(|| anyhow::anyhow!("{box_name} is not running"))?;
        if unsafe { libc::kill(-pid, sig) } != 0 {
            anyhow::bail!(
                "{box_name}: signal {sig}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }

    /// Kill every mover still running and wait for the readers to finish (bounded).
    pub async fn stop_all(&self) {
        let pids: Vec<(String, i32)> = self
            .pids
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for (name, pid) in pids {
            self.history.record(
                "harness",
                OpType::Info,
                "kill",
                json!({ "target": name, "why": "the run ended" }),
            );
            unsafe {
                libc::kill(-pid, libc::SIGCONT);
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.tasks.lock().unwrap());
        for t in tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(std::time::Duration::from_secs(10), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for Movers {
    fn drop(&mut self) {
        for (_, pid) in self.pids.lock().unwrap().iter() {
            unsafe {
                libc::kill(-*pid, libc::SIGCONT);
                libc::kill(-*pid, libc::SIGKILL);
            }
        }
    }
}
