//! The nemesis at work: applies a schedule's operations to the cluster, the links and the movers at their scenario times, records each as a history operation, and heals everything before the final reads.
//!
//! Each fault family has one home with the same small interface: `lead` (how early its
//! work begins before the instant), `apply` (the opening verb, or with `op.heal` the closing
//! one): `signal.rs` (pause, kill), `database.rs` (stop, crash), `link.rs` (toxics and cuts),
//! `clock.rs` (a box's or node's wall clock), `cpu.rs` (a starved CPU), `stall.rs` (a node's
//! commits held). This file schedules, records and heals; the verb pairs
//! come from `chaos_nemesis::VERB_PAIRS`.

pub mod clock;
pub mod cpu;
mod database;
pub mod link;
mod signal;
mod stall;

use crate::backend::Cluster;
use crate::links::Links;
use crate::movers::Movers;
use crate::progress::Progress;
use crate::scenario::Scenario;
use chaos_history::{HistoryWriter, OpType, ScenarioClock};
use chaos_nemesis::{Family, FaultKind, NemesisOp, Schedule};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Set when the schedule is over: held proxy changes not yet sent are called off.
    cancel: Arc<std::sync::atomic::AtomicBool>,
    /// The lock service's own server (etcd), the node `lock`: set by a run that has one.
    pub lock: std::sync::OnceLock<Arc<tokio::sync::Mutex<crate::lock::LockServer>>>,
    /// The member each `lock-leader` fault landed on, by fault index (its heal goes there too).
    leaders: Mutex<std::collections::HashMap<usize, String>>,
    /// The tickers of running or strobing clocks, by fault index (a heal aborts its own).
    clocks: Mutex<std::collections::HashMap<usize, tokio::task::JoinHandle<()>>>,
    /// An admin session to each node a stall names, opened as the clock starts.
    stall_sessions: tokio::sync::Mutex<std::collections::HashMap<String, tokio_postgres::Client>>,
    /// What each clock fault did, when: a node's stamps are read back to real time by it.
    pub clock_log: Mutex<clock::ClockLog>,
    /// The cpu faults in force, by fault index: the target each starved.
    starved: Mutex<std::collections::HashMap<usize, String>>,
    /// Held while a cpu fault places its target or sets its share (see `cpu::apply`).
    placing: tokio::sync::Mutex<()>,
    /// Where each target's CPU share is set, placed before the clock starts (given back at the end).
    cgroups: Mutex<std::collections::HashMap<String, cpu::Starved>>,
}

impl Drop for Nemesis {
    /// Nothing outlives the run: the clocks' tickers stop, the CPU shares come back.
    fn drop(&mut self) {
        for (_, ticker) in self.clocks.get_mut().unwrap().drain() {
            ticker.abort();
        }
        for (_, s) in self.cgroups.get_mut().unwrap().drain() {
            cpu::give_back_now(s);
        }
    }
}

/// A node or box fault on another target.
fn with_target(kind: &FaultKind, name: &str) -> FaultKind {
    let mut kind = kind.clone();
    if !kind.is_link_fault() {
        *kind.target_mut() = name.to_string();
    }
    kind
}

/// Run `f` on a blocking thread at `at` (the invoke recorded just before it), woken by the
/// OS's timer at real-time priority as a held proxy change is: tokio's timer wakes to the
/// millisecond, up to one late. For the changes that are a write or a signal (a clock's offset,
/// a CPU quota, a stall's reload).
async fn at_instant<T: Send + 'static>(
    at: Instant,
    invoke: &Invoke,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let record = invoke.hook();
    tokio::task::spawn_blocking(move || {
        let realtime = chaos_proxy::realtime::raise_current_thread();
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        record();
        let out = f();
        if realtime {
            chaos_proxy::realtime::lower_current_thread();
        }
        out
    })
    .await
    .expect("a change at its instant does not panic")
}

/// How far ahead of its instant a proxy change begins (its reads), real time.
const PREPARE: Duration = Duration::from_millis(30);

/// What an applied operation adds to its `ok` record, and the instant it landed when known
/// (a held proxy change, a database start when its links open); else it landed when applied.
struct Applied {
    extra: Value,
    landed: Option<Instant>,
}

impl Applied {
    fn now(extra: Value) -> Applied {
        Applied {
            extra,
            landed: None,
        }
    }
}

/// A fault's invoke record, written once: when its change is sent, or before its outcome.
struct Invoke(Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>);

impl Invoke {
    fn new(history: &HistoryWriter, verb: &str, value: Value) -> Invoke {
        let (h, verb) = (history.clone(), verb.to_string());
        Invoke(Arc::new(Mutex::new(Some(Box::new(move || {
            h.record("nemesis", OpType::Invoke, &verb, value);
        })))))
    }

    /// A hook for a held proxy client: records the invoke just before the change is sent.
    fn hook(&self) -> Box<dyn FnOnce() + Send> {
        let cell = self.0.clone();
        Box::new(move || {
            if let Some(f) = cell.lock().unwrap().take() {
                f()
            }
        })
    }

    /// Record the invoke now, unless it already was.
    fn fire(&self) {
        let f = self.0.lock().unwrap().take();
        if let Some(f) = f {
            f()
        }
    }
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
            cancel: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            lock: std::sync::OnceLock::new(),
            leaders: Mutex::new(Default::default()),
            clocks: Mutex::new(Default::default()),
            starved: Mutex::new(Default::default()),
            cgroups: Mutex::new(Default::default()),
            clock_log: Mutex::new(Default::default()),
            stall_sessions: Default::default(),
            placing: Default::default(),
        })
    }

    /// The lock service's server when `node` is one of its members (`lock`, `lock-2`, or the
    /// role `lock-leader`) and the service has a server of its own.
    fn lock_server(&self, node: &str) -> Option<&Arc<tokio::sync::Mutex<crate::lock::LockServer>>> {
        crate::lock::is_lock_node(node)
            .then(|| self.lock.get())
            .flatten()
    }

    /// A fault on the role `lock-leader` made a fault on the member that leads when it lands
    /// (its heal on the same member), with what the record says of it: the role, the members
    /// by etcd id and who led. Unchanged for any other target.
    async fn resolve_leader(&self, op: &NemesisOp) -> Result<(NemesisOp, Value), String> {
        if op.kind.target() != crate::lock::LOCK_LEADER || op.kind.is_link_fault() {
            return Ok((op.clone(), Value::Null));
        }
        let Some(lock) = self.lock.get() else {
            return Err("lock-leader names an etcd member, and the lock has no server".into());
        };
        let (now, ids) = lock.lock().await.leader().await;
        let known = self.leaders.lock().unwrap().get(&op.fault).cloned();
        let member = match (known, op.heal) {
            (Some(m), _) => m,
            (None, false) => now
                .clone()
                .ok_or("no member named a leader when the fault landed")?,
            (None, true) => return Err("its fault never landed on a member".into()),
        };
        self.leaders
            .lock()
            .unwrap()
            .insert(op.fault, member.clone());
        let mut resolved = op.clone();
        resolved.kind = with_target(&op.kind, &member);
        let names: Vec<&str> = ids.iter().map(|(n, _)| n.as_str()).collect();
        let by_id: serde_json::Map<String, Value> = ids
            .iter()
            .map(|(n, id)| (n.clone(), json!(format!("{id:x}"))))
            .collect();
        Ok((
            resolved,
            json!({
                "role": crate::lock::LOCK_LEADER,
                "leader": now,
                "members": names.join(", "),
                "member_ids": by_id,
            }),
        ))
    }

    /// Real instant an operation is scheduled for.
    fn scheduled(&self, op: &NemesisOp) -> Instant {
        let offset_ns = self
            .history
            .clock()
            .real_ns_for_scenario_ms(op.at_ms - self.scenario.start_ms)
            .max(0);
        self.t0 + Duration::from_nanos(offset_ns as u64)
    }

    /// When to begin working on an operation so that it lands at its scheduled instant: its
    /// family's lead before it.
    async fn wake(&self, op: &NemesisOp) -> Instant {
        self.wake_for(op, self.scheduled(op)).await
    }

    /// When work on `op` must begin for it to land at `at`: a database start or a restart
    /// begins early by what it takes.
    async fn wake_for(&self, op: &NemesisOp, at: Instant) -> Instant {
        let lead = match op.kind.family() {
            Family::Signal => signal::lead(self, op),
            Family::Database => database::lead(self, op).await,
            Family::Link => link::lead(),
            Family::Clock => clock::lead(),
            Family::Cpu => cpu::lead(),
            Family::Stall => stall::lead(),
        };
        at.checked_sub(lead).unwrap_or(at)
    }

    /// Apply every operation due at or before the scenario start, all landing at `t0`
    /// (the movers are let go after this).
    pub async fn apply_initial(self: &Arc<Self>, schedule: &Schedule) -> usize {
        let first: Vec<_> = schedule
            .ops
            .iter()
            .take_while(|o| o.at_ms <= self.scenario.start_ms)
            .map(|op| self.apply_recorded(op, self.t0, true))
            .collect();
        let n = first.len();
        futures_util::future::join_all(first).await;
        n
    }

    /// Apply the rest of the schedule at its times. Each operation is worked on in its own
    /// task from its wake time, so two faults due together both land on time; operations
    /// on the same link, node or box keep their order. Cancel by aborting the task (the
    /// operations in flight are aborted with it; a proxy change still waiting for its
    /// instant is called off by `heal_all`).
    pub async fn run(self: Arc<Self>, schedule: Schedule, skip: usize) {
        // The movers run by now: the targets of cpu faults go to their cgroups, and a session
        // opens to each node a stall names, beside the schedule (a fault due meanwhile waits).
        let me = self.clone();
        tokio::spawn(async move {
            cpu::place_ahead(&me).await;
            stall::open_ahead(&me).await;
        });
        use futures_util::future::{FutureExt, Shared};
        type Done = Shared<futures_util::future::BoxFuture<'static, ()>>;
        let mut tasks = tokio::task::JoinSet::new();
        let mut last: std::collections::HashMap<String, Done> = Default::default();
        // Chains in schedule order first, then work begins in wake order: a database start
        // begun early must still wait for its stop, and must not wait behind other faults.
        let mut plan = Vec::new();
        for op in schedule.ops.into_iter().skip(skip) {
            let keys = if op.links.is_empty() {
                vec![op.kind.target().to_string()]
            } else {
                op.links.clone()
            };
            let before: Vec<Done> = keys.iter().filter_map(|k| last.get(k).cloned()).collect();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let done: Done = rx.map(|_| ()).boxed().shared();
            for k in keys {
                last.insert(k, done.clone());
            }
            let wake = self.wake(&op).await;
            plan.push((wake, op, before, tx));
        }
        plan.sort_by_key(|p| p.0);
        for (wake, op, before, tx) in plan {
            tokio::time::sleep_until(wake.into()).await;
            let me = self.clone();
            tasks.spawn(async move {
                futures_util::future::join_all(before).await;
                let at = me.scheduled(&op);
                me.apply_recorded(&op, at, true).await;
                let _ = tx.send(());
            });
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Record invoke, apply, record ok (or info when it did not take: never dropped silently).
    /// The invoke is recorded when the operation takes effect: when a held proxy change is
    /// sent, else at `at`.
    async fn apply_recorded(&self, op: &NemesisOp, at: Instant, cancellable: bool) {
        let (op, role) = match self.resolve_leader(op).await {
            Ok(r) => r,
            Err(e) => (
                op.clone(),
                json!({ "role": crate::lock::LOCK_LEADER, "error": e }),
            ),
        };
        let op = &op;
        let target = op.kind.target().to_string();
        let mut value = json!({
            "target": target,
            "fault": op.fault,
            "scheduled": ScenarioClock::format(op.at_ms),
            "scheduled_ms": op.at_ms,
        });
        if let Value::Object(m) = role {
            for (k, v) in m {
                value[k] = v;
            }
        }
        if !op.links.is_empty() {
            value["links"] = json!(op.links);
        }
        if !op.heal {
            value["params"] = serde_json::to_value(&op.kind).unwrap_or(Value::Null);
        }
        let invoke = Invoke::new(&self.history, op.verb, value.clone());
        let held = self.links.client().held_until(
            at,
            Some(invoke.hook()),
            cancellable.then(|| self.cancel.clone()),
        );
        let result = match value.get("error").and_then(Value::as_str) {
            // A `lock-leader` nobody could be named for: said, not applied.
            Some(e) => Err(e.to_string()),
            None => self.apply(op, at, &held, &invoke).await,
        };
        invoke.fire();
        // The operation lands when its change was answered (a held proxy change; a database
        // start when its links open, or when it accepts connections), else when applied.
        let landed = match &result {
            Ok(Applied {
                landed: Some(t), ..
            }) => *t,
            _ => Instant::now(),
        };
        let lag_us = landed.saturating_duration_since(at).as_micros() as i64
            - at.saturating_duration_since(landed).as_micros() as i64;
        value["lag_real_us"] = json!(lag_us);
        let label = format!("{} {}", op.kind.verb(), target);
        match result {
            Ok(Applied { extra, .. }) => {
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
                    if signal::needs_heal(&op.kind) {
                        self.active.lock().unwrap().push(op.clone());
                    }
                }
                self.history.record("nemesis", OpType::Ok, op.verb, value);
            }
            Err(e) => {
                value["error"] = json!(e);
                eprintln!(
                    "nemesis: {} {target} at {} did not take: {e}",
                    op.verb,
                    ScenarioClock::format(op.at_ms)
                );
                self.history.record("nemesis", OpType::Info, op.verb, value);
            }
        }
    }

    /// Apply one operation through its family. `held` is the proxy client holding its changes
    /// until `at`; a family that does not change the proxy waits for `at` itself and records
    /// the invoke.
    async fn apply(
        &self,
        op: &NemesisOp,
        at: Instant,
        held: &chaos_proxy::ToxiproxyClient,
        invoke: &Invoke,
    ) -> Result<Applied, String> {
        match op.kind.family() {
            Family::Signal => signal::apply(self, op, at, invoke).await,
            Family::Database => database::apply(self, op, at, held, invoke).await,
            Family::Link => link::apply(self, op, held).await,
            Family::Clock => clock::apply(self, op, at, invoke).await,
            Family::Cpu => cpu::apply(self, op, at, invoke).await,
            Family::Stall => stall::apply(self, op, at, invoke).await,
        }
    }

    /// Apply a triggered fault (fault `index`, its target resolved), or its heal, landing at `at`:
    /// work begins early as for a scheduled operation (a triggered stop's start is begun
    /// early by its measured start time, so its clients get the database back at `at`).
    pub async fn apply_now(&self, index: usize, kind: FaultKind, heal: bool, at: Instant) {
        let links = if kind.is_link_fault() {
            chaos_nemesis::LinkPattern::parse(kind.target())
                .map(|p| p.resolve(&self.scenario.topology()))
                .unwrap_or_default()
        } else {
            vec![]
        };
        let since_t0 = at.saturating_duration_since(self.t0).as_nanos() as i64;
        let op = NemesisOp {
            at_ms: self.history.clock().scenario_ms_at_run_ns(since_t0),
            verb: if heal { kind.heal_verb() } else { kind.verb() },
            fault: index,
            heal,
            kind,
            links,
        };
        tokio::time::sleep_until(self.wake_for(&op, at).await.into()).await;
        self.apply_recorded(&op, at, true).await;
    }

    /// Heal every fault still active (resume, start, heal links, reset clocks), recorded as operations.
    pub async fn heal_all(&self) {
        // A proxy change still waiting for its instant is called off.
        self.cancel.store(true, std::sync::atomic::Ordering::SeqCst);
        let active: Vec<NemesisOp> = self.active.lock().unwrap().clone();
        for op in active {
            let heal = NemesisOp {
                at_ms: self.history.now_scenario_ms(),
                verb: op.kind.heal_verb(),
                fault: op.fault,
                heal: true,
                kind: op.kind.clone(),
                links: op.links.clone(),
            };
            self.apply_recorded(&heal, Instant::now(), false).await;
        }
        let tickers: Vec<_> = self
            .clocks
            .lock()
            .unwrap()
            .drain()
            .map(|(_, t)| t)
            .collect();
        for ticker in tickers {
            ticker.abort();
            let _ = ticker.await;
        }
        let placed: Vec<cpu::Starved> = self
            .cgroups
            .lock()
            .unwrap()
            .drain()
            .map(|(_, s)| s)
            .collect();
        for s in placed {
            if let Err(e) = cpu::give_back(s).await {
                eprintln!("nemesis: giving a cgroup back: {e}");
            }
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
