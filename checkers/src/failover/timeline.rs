//! What a failover run's history says happened, in scenario time: each order's outcome, each server's role and each link's state as the observer saw them change, and the watcher's own lines.

use crate::times::scenario_ms;
use chaos_history::failover_names as names;
use chaos_history::{FailoverMeta, Op, OpType, ScenarioMs};
use std::collections::BTreeMap;

/// An order as the app saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    pub invoked_ms: ScenarioMs,
    pub outcome: Outcome,
}

/// How an order ended, client side. `Pending`: invoked and never answered (uncertain).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pending,
    /// Acknowledged by `node` at `ms`.
    Ok {
        node: String,
        ms: i64,
    },
    Fail,
    Info,
}

/// A server's role as the observer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Standby,
    Down,
}

/// One link's state from a moment on.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkState {
    pub ms: i64,
    pub enabled: bool,
    /// The server its upstream names (the service record's target).
    pub node: Option<String>,
}

/// Everything the history says, in scenario ms.
#[derive(Debug, Default)]
pub struct Timeline {
    pub orders: BTreeMap<String, Order>,
    pub roles: BTreeMap<String, Vec<(i64, Role)>>,
    /// By link name (`app->primary`, `service`).
    pub links: BTreeMap<String, Vec<LinkState>>,
    /// The watcher's lines: (ms, f, type, value).
    pub watcher: Vec<(i64, String, OpType, serde_json::Value)>,
    /// Nemesis operations: (ms, verb, target).
    pub faults: Vec<(i64, String, String)>,
    /// The last event's time.
    pub last_ms: ScenarioMs,
}

impl Timeline {
    /// Read every event once, in the order the lines say (`observed::in_order`), not the
    /// order they stand in the file.
    pub fn of(meta: &FailoverMeta, history: &[Op]) -> Timeline {
        let mut t = Timeline::default();
        for op in crate::observed::in_order(history) {
            let ms = meta.clock.scenario_ms_at_run_ns(op.time_ns);
            t.last_ms = t.last_ms.max(ms);
            match op.process.as_str() {
                names::APP => t.app(op, ms),
                names::OBSERVER => t.observer(op, ms),
                names::WATCHER => t
                    .watcher
                    .push((ms, op.f.clone(), op.kind, op.value.clone())),
                "nemesis" if op.kind == OpType::Ok => {
                    let target = op.value["target"].as_str().unwrap_or("").to_string();
                    t.faults.push((ms, op.f.clone(), target));
                }
                _ => {}
            }
        }
        t
    }

    fn app(&mut self, op: &Op, ms: i64) {
        if op.f != names::ORDER {
            return;
        }
        let Some(id) = op.value["id"].as_str() else {
            return;
        };
        let outcome = match op.kind {
            // An invoke never undoes an answer already read (an `ok` stamped before its
            // invoke, or the same line twice): it only dates the order.
            OpType::Invoke => {
                let order = self.orders.entry(id.to_string()).or_insert(Order {
                    invoked_ms: ms,
                    outcome: Outcome::Pending,
                });
                order.invoked_ms = order.invoked_ms.min(ms);
                return;
            }
            OpType::Ok => Outcome::Ok {
                node: op.value["node"].as_str().unwrap_or("").to_string(),
                ms,
            },
            OpType::Fail => Outcome::Fail,
            OpType::Info => Outcome::Info,
        };
        let order = self.orders.entry(id.to_string()).or_insert(Order {
            invoked_ms: ms,
            outcome: Outcome::Pending,
        });
        order.outcome = outcome;
    }

    fn observer(&mut self, op: &Op, ms: i64) {
        let v = &op.value;
        match op.f.as_str() {
            names::ROLE => {
                let role = match v["role"].as_str() {
                    Some("primary") => Role::Primary,
                    Some("standby") => Role::Standby,
                    _ => Role::Down,
                };
                let node = v["node"].as_str().unwrap_or("").to_string();
                self.roles.entry(node).or_default().push((ms, role));
            }
            names::PROXY => {
                let link = v["link"].as_str().unwrap_or("").to_string();
                self.links.entry(link).or_default().push(LinkState {
                    ms,
                    enabled: v["enabled"].as_bool().unwrap_or(true),
                    node: v["node"].as_str().map(str::to_string),
                });
            }
            _ => {}
        }
    }

    /// When the replica first became a primary (the observer's record; else the watcher's
    /// `promote` ok line).
    pub fn promotion_ms(&self) -> Option<i64> {
        let seen = self
            .roles
            .get(names::REPLICA)
            .and_then(|r| r.iter().find(|(_, role)| *role == Role::Primary))
            .map(|(ms, _)| *ms);
        seen.or_else(|| {
            self.watcher
                .iter()
                .find(|(_, f, kind, _)| f == names::PROMOTE && *kind == OpType::Ok)
                .map(|(ms, ..)| *ms)
        })
    }

    /// A server's role at `ms` (its first known role before the first change).
    pub fn role_at(&self, node: &str, ms: i64) -> Option<Role> {
        let changes = self.roles.get(node)?;
        let before = changes.iter().take_while(|(t, _)| *t <= ms).last();
        before.or(changes.first()).map(|(_, r)| *r)
    }

    /// The stretches `[from, to)` in which `node` was a primary its app link reached: it could
    /// accept the app's writes. Until `end` when still so at the end.
    pub fn writable(&self, node: &str, end: i64) -> Vec<(i64, i64)> {
        let link = format!("{}->{node}", names::APP);
        let mut changes: Vec<i64> = Vec::new();
        if let Some(r) = self.roles.get(node) {
            changes.extend(r.iter().map(|(t, _)| *t));
        }
        if let Some(l) = self.links.get(&link) {
            changes.extend(l.iter().map(|s| s.ms));
        }
        changes.sort_unstable();
        changes.dedup();
        let mut out: Vec<(i64, i64)> = Vec::new();
        let mut open: Option<i64> = None;
        for t in changes {
            let yes = self.role_at(node, t) == Some(Role::Primary) && self.enabled_at(&link, t);
            match (yes, open) {
                (true, None) => open = Some(t),
                (false, Some(from)) => {
                    out.push((from, t));
                    open = None;
                }
                _ => {}
            }
        }
        if let Some(from) = open {
            if from < end {
                out.push((from, end));
            }
        }
        out
    }

    /// Whether `link` was enabled at `ms` (enabled before the observer's first sample).
    pub fn enabled_at(&self, link: &str, ms: i64) -> bool {
        self.links
            .get(link)
            .and_then(|l| l.iter().take_while(|s| s.ms <= ms).last())
            .is_none_or(|s| s.enabled)
    }

    /// The first time after `from` that `link` was seen disabled.
    pub fn first_disabled(&self, link: &str, from: i64) -> Option<i64> {
        self.links
            .get(link)?
            .iter()
            .find(|s| s.ms >= from && !s.enabled)
            .map(|s| s.ms)
    }

    /// When the service record first named `node` after `from`.
    pub fn repointed_to(&self, node: &str, from: i64) -> Option<i64> {
        self.links
            .get(names::SERVICE)?
            .iter()
            .find(|s| s.ms >= from && s.node.as_deref() == Some(node))
            .map(|s| s.ms)
    }

    /// The watcher's first line `f` of `kind`, when it printed one.
    pub fn watcher_line(&self, f: &str, kind: OpType) -> Option<(i64, &serde_json::Value)> {
        self.watcher
            .iter()
            .find(|(_, g, k, _)| g == f && *k == kind)
            .map(|(ms, _, _, v)| (*ms, v))
    }

    /// Check latencies the watcher reported (real ms), in order.
    pub fn check_latencies_ms(&self) -> Vec<f64> {
        self.watcher
            .iter()
            .filter(|(_, f, _, _)| f == names::CHECK)
            .filter_map(|(_, _, _, v)| v["latency_ms"].as_f64())
            .collect()
    }
}

/// A commit time (Unix ns) as scenario ms.
pub fn commit_ms(meta: &FailoverMeta, unix_ns: i64) -> i64 {
    scenario_ms(&meta.clock, unix_ns)
}
