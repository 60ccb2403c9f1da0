//! The nemesis at work: applies a schedule's operations to the cluster, the links and the movers at their scenario times, records each as a history operation, and heals everything before the final reads.

use crate::backend::Cluster;
use crate::links::Links;
use crate::movers::Movers;
use crate::pg::StopMode;
use crate::progress::Progress;
use crate::scenario::Scenario;
use chaos_history::{HistoryWriter, OpType, ScenarioClock};
use chaos_nemesis::{FaultKind, NemesisOp, Schedule};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where libfaketime lives on Debian.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

pub struct Nemesis {
    pub cluster: Arc<tokio::sync::Mutex<Cluster>>,
    pub links: Arc<Links>,
    pub movers: Arc<Movers>,
    pub history: HistoryWriter,
    pub progress: Arc<Progress>,
    pub scenario: Arc<Scenario>,
    /// The run's monotonic origin (scenario start).
    pub t0: Instant,
    /// Faults applied and not yet healed.
    active: Mutex<Vec<NemesisOp>>,
    /// How late each operation landed, real µs.
    lags_us: Mutex<Vec<i64>>,
}

impl Nemesis {
    pub fn new(
        cluster: Arc<tokio::sync::Mutex<Cluster>>,
        links: Arc<Links>,
        movers: Arc<Movers>,
        history: HistoryWriter,
        progress: Arc<Progress>,
        scenario: Arc<Scenario>,
        t0: Instant,
    ) -> Arc<Nemesis> {
        Arc::new(Nemesis {
            cluster,
            links,
            movers,
            history,
            progress,
            scenario,
            t0,
            active: Mutex::new(vec![]),
            lags_us: Mutex::new(vec![]),
        })
    }

    /// Real instant an operation is due. A database start is issued early by
    /// the node's measured start time, so it accepts connections on time.
    async fn due(&self, op: &NemesisOp) -> Instant {
        let offset_ns = self
            .history
            .clock()
            .real_ns_for_scenario_ms(op.at_ms - self.scenario.start_ms)
            .max(0);
        let mut due = self.t0 + Duration::from_nanos(offset_ns as u64);
        if op.verb == "start" {
            let lead = self.cluster.lock().await.last_start(op.kind.target());
            due = due.checked_sub(lead).unwrap_or(due);
        }
        due
    }

    /// Apply every operation due at or before the scenario start (before the movers start).
    pub async fn apply_initial(self: &Arc<Self>, schedule: &Schedule) -> usize {
        // Together, not one after another: the movers start when these are in place.
        let first: Vec<_> = schedule
            .ops
            .iter()
            .take_while(|o| o.at_ms <= self.scenario.start_ms)
            .map(|op| self.apply_recorded(op, self.t0))
            .collect();
        let n = first.len();
        futures_util::future::join_all(first).await;
        n
    }

    /// Apply the rest of the schedule at its times. Cancel by aborting the task.
    pub async fn run(self: Arc<Self>, schedule: Schedule, skip: usize) {
        for op in schedule.ops.into_iter().skip(skip) {
            let due = self.due(&op).await;
            tokio::time::sleep_until(due.into()).await;
            if op.verb == "start-mover" {
                self.movers
                    .pending_restarts
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
            self.apply_recorded(&op, due).await;
        }
    }

    /// Record invoke, apply, record ok (or info when it did not take: never dropped silently).
    async fn apply_recorded(&self, op: &NemesisOp, due: Instant) {
        let target = op.kind.target().to_string();
        let mut value = json!({
            "target": target,
            "fault": op.fault,
            "scheduled": ScenarioClock::format(op.at_ms),
            "scheduled_ms": op.at_ms,
        });
        if !op.links.is_empty() {
            value["links"] = json!(op.links);
        }
        if !op.heal {
            value["params"] = serde_json::to_value(&op.kind).unwrap_or(Value::Null);
        }
        self.history
            .record("nemesis", OpType::Invoke, &op.verb, value.clone());
        let result = self.apply(op).await;
        // A start lands when the node accepts connections; anything else when applied.
        let landed = Instant::now();
        let lag_us = if op.verb == "start" {
            let scheduled = self.t0
                + Duration::from_nanos(
                    self.history
                        .clock()
                        .real_ns_for_scenario_ms(op.at_ms - self.scenario.start_ms)
                        .max(0) as u64,
                );
            landed.saturating_duration_since(scheduled).as_micros() as i64
                - scheduled.saturating_duration_since(landed).as_micros() as i64
        } else {
            landed.saturating_duration_since(due).as_micros() as i64
        };
        value["lag_real_us"] = json!(lag_us);
        let label = format!("{} {}", op.kind.verb(), target);
        match result {
            Ok(extra) => {
                if let Value::Object(m) = extra {
                    for (k, v) in m {
                        value[k] = v;
                    }
                }
                self.lags_us.lock().unwrap().push(lag_us);
                if op.heal {
                    self.progress.fault_healed(&label);
                    self.active.lock().unwrap().retain(|a| a.fault != op.fault);
                } else {
                    self.progress.fault_started(label);
                    if op_needs_heal(&op.kind) {
                        self.active.lock().unwrap().push(op.clone());
                    }
                }
                self.history.record("nemesis", OpType::Ok, &op.verb, value);
            }
            Err(e) => {
                value["error"] = json!(e);
                eprintln!(
                    "nemesis: {} {target} at {} did not take: {e}",
                    op.verb,
                    ScenarioClock::format(op.at_ms)
                );
                self.history
                    .record("nemesis", OpType::Info, &op.verb, value);
            }
        }
    }

    async fn apply(&self, op: &NemesisOp) -> Result<Value, String> {
        let target = op.kind.target();
        match (&op.kind, op.heal) {
            (FaultKind::Pause { freezer, .. }, false) => {
                let how = if *freezer { "freezer" } else { "SIGSTOP" };
                self.movers
                    .signal(target, libc::SIGSTOP, *freezer)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(json!({ "how": how }))
            }
            (FaultKind::Pause { freezer, .. }, true) => {
                self.movers
                    .signal(target, libc::SIGCONT, *freezer)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Value::Null)
            }
            (FaultKind::Kill { .. }, false) => {
                self.movers
                    .signal(target, libc::SIGKILL, false)
                    .await
                    .map_err(|e| e.to_string())?;
                if self
                    .scenario
                    .faults
                    .get(op.fault)
                    .and_then(|f| f.duration_ms)
                    .is_some()
                {
                    self.movers
                        .pending_restarts
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                Ok(Value::Null)
            }
            (FaultKind::Kill { .. }, true) => {
                // The killed process may still be being reaped.
                for _ in 0..200 {
                    if !self.movers.is_running(target) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                self.movers
                    .spawn(target)
                    .await
                    .map(|_| Value::Null)
                    .map_err(|e| e.to_string())
            }
            (FaultKind::Stop { .. }, false) => self
                .cluster
                .lock()
                .await
                .stop_node(target, StopMode::Fast)
                .await
                .map(|_| Value::Null)
                .map_err(|e| e.to_string()),
            (FaultKind::Crash { .. }, false) => self
                .cluster
                .lock()
                .await
                .stop_node(target, StopMode::Immediate)
                .await
                .map(|_| Value::Null)
                .map_err(|e| e.to_string()),
            (FaultKind::Stop { .. } | FaultKind::Crash { .. }, true) => {
                let took = self
                    .cluster
                    .lock()
                    .await
                    .start_node(target)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(json!({ "start_real_ms": took.as_millis() as u64 }))
            }
            (FaultKind::Clock { offset_ms, .. }, heal) => {
                let offset_s = if heal {
                    0.0
                } else {
                    *offset_ms as f64 / 1000.0 * self.scenario.file.time_scale_ms / 1000.0
                };
                let path = crate::run::faketime_file(&self.movers_log_dir(), target);
                std::fs::write(&path, format!("{offset_s:+.3}\n"))
                    .map_err(|e| format!("write {}: {e}", path.display()))?;
                Ok(json!({ "offset_real_s": offset_s }))
            }
            (kind, false) => {
                let mut applied = Vec::new();
                for link in &op.links {
                    applied.push(
                        self.links
                            .inject(link, kind, &self.scenario)
                            .await
                            .map_err(|e| format!("{link}: {e}"))?,
                    );
                }
                Ok(json!({ "toxics": applied }))
            }
            (_, true) => {
                for link in &op.links {
                    self.links
                        .heal(link)
                        .await
                        .map_err(|e| format!("{link}: {e}"))?;
                }
                Ok(Value::Null)
            }
        }
    }

    fn movers_log_dir(&self) -> std::path::PathBuf {
        self.movers.log_dir()
    }

    /// Heal every fault still active (resume, start, heal links, reset clocks), recorded as operations.
    pub async fn heal_all(&self) {
        let active: Vec<NemesisOp> = self.active.lock().unwrap().clone();
        for op in active {
            let heal = NemesisOp {
                at_ms: self.history.now_scenario_ms(),
                verb: op.kind.heal_verb().into(),
                fault: op.fault,
                heal: true,
                kind: op.kind.clone(),
                links: op.links.clone(),
            };
            self.apply_recorded(&heal, Instant::now()).await;
        }
        // Belt and braces: no toxic survives into the final reads.
        if let Err(e) = self.links.reset().await {
            eprintln!("nemesis: resetting the proxy failed: {e}");
        }
    }

    /// Lag of each applied operation, real µs.
    pub fn lags_us(&self) -> Vec<i64> {
        self.lags_us.lock().unwrap().clone()
    }
}

/// Faults that leave something to undo.
fn op_needs_heal(kind: &FaultKind) -> bool {
    !matches!(kind, FaultKind::Kill { .. })
}
