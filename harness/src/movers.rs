//! The movers under test: spawned per box, their stdout read into the history, signalled by the nemesis, reaped on every path.

use crate::backend::{Launcher, MoverSpec, Signaller};
use crate::progress::Progress;
use chaos_history::{HistoryWriter, OpType};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

/// Every box's mover: specs to (re)start them, signallers to reach them, a count of those running.
pub struct Movers {
    specs: BTreeMap<String, MoverSpec>,
    launcher: Launcher,
    running_now: Mutex<BTreeMap<String, Signaller>>,
    running: AtomicUsize,
    /// Kills whose restart has not happened yet: the run is not over while any is pending.
    pub pending_restarts: AtomicUsize,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    history: HistoryWriter,
    progress: Arc<Progress>,
    exits: Mutex<BTreeMap<String, Option<i32>>>,
    log_dir: PathBuf,
}

impl Movers {
    pub fn new(
        specs: Vec<MoverSpec>,
        launcher: Launcher,
        history: HistoryWriter,
        progress: Arc<Progress>,
        log_dir: PathBuf,
    ) -> Arc<Movers> {
        Arc::new(Movers {
            specs: specs.into_iter().map(|s| (s.box_name.clone(), s)).collect(),
            launcher,
            running_now: Mutex::new(BTreeMap::new()),
            running: AtomicUsize::new(0),
            pending_restarts: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
            history,
            progress,
            exits: Mutex::new(BTreeMap::new()),
            log_dir,
        })
    }

    pub fn log_dir(&self) -> PathBuf {
        self.log_dir.clone()
    }

    pub fn boxes(&self) -> Vec<String> {
        self.specs.keys().cloned().collect()
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    pub fn is_running(&self, box_name: &str) -> bool {
        self.running_now.lock().unwrap().contains_key(box_name)
    }

    /// Exit codes of every mover that exited (None: killed by a signal).
    pub fn exits(&self) -> BTreeMap<String, Option<i32>> {
        self.exits.lock().unwrap().clone()
    }

    /// Start one box's mover and the task that reads its output and reaps it.
    /// Start `box_name`'s mover held at its gate, so a `spawn` at the instant only lets it go.
    pub async fn prepare(&self, box_name: &str) -> anyhow::Result<()> {
        let spec = self
            .specs
            .get(box_name)
            .ok_or_else(|| anyhow::anyhow!("unknown box {box_name}"))?;
        self.launcher.prepare(spec).await
    }

    /// See [`Launcher::prepare_lead`].
    pub fn prepare_lead(&self) -> std::time::Duration {
        self.launcher.prepare_lead()
    }

    pub async fn spawn(self: &Arc<Self>, box_name: &str) -> anyhow::Result<()> {
        let spec = self
            .specs
            .get(box_name)
            .ok_or_else(|| anyhow::anyhow!("unknown box {box_name}"))?;
        if self.is_running(box_name) {
            anyhow::bail!("{box_name} is already running");
        }
        let (mut mover, stdout) = self.launcher.spawn(spec).await?;
        self.running_now
            .lock()
            .unwrap()
            .insert(box_name.to_string(), mover.signaller());
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
            me.running_now.lock().unwrap().remove(&name);
            me.exits.lock().unwrap().insert(name.clone(), code);
            me.history
                .record(&name, OpType::Info, "exit", json!({ "code": code }));
            me.running.fetch_sub(1, Ordering::SeqCst);
        });
        self.tasks.lock().unwrap().push(reader);
        Ok(())
    }

    /// A history line from a mover: `{"type","f","value"}`; anything else goes to its log.
    fn take_line(&self, box_name: &str, line: &str, log_path: &Path) {
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

    /// Signal a box's mover (its process group, or its container).
    pub async fn signal(&self, box_name: &str, sig: i32, freezer: bool) -> anyhow::Result<()> {
        let s = self
            .running_now
            .lock()
            .unwrap()
            .get(box_name)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{box_name} is not running"))?;
        s.signal(sig, freezer)
            .await
            .map_err(|e| anyhow::anyhow!("{box_name}: {e}"))
    }

    /// Kill every mover still running and wait for the readers to finish (bounded).
    pub async fn stop_all(&self) {
        let running: Vec<(String, Signaller)> = self
            .running_now
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (name, s) in running {
            self.history.record(
                "harness",
                OpType::Info,
                "kill",
                json!({ "target": name, "why": "the run ended" }),
            );
            s.kill_now();
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
        for s in self.running_now.lock().unwrap().values() {
            s.kill_now();
        }
    }
}
