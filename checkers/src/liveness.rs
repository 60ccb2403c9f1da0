//! The liveness check: did every planned turbine leave its source shard, and when did the plan finish.

use crate::times::{format_ms, scenario_ms};
use crate::writes::{changed_rows, is_governed};
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::{Audit, FinalState, RunMeta, WriteOp};
use serde_json::json;
use std::collections::HashMap;

/// A planned turbine still on its source at the end.
#[derive(Debug, Clone)]
pub struct NotMoved {
    pub turbine: String,
    pub from: String,
    pub to: String,
    pub rows_on_source: u64,
}

#[derive(Debug, Default)]
pub struct Liveness {
    pub planned: u64,
    pub not_moved: Vec<NotMoved>,
    /// Per moved turbine, when its last source delete that took rows committed (Unix ns);
    /// absent for a turbine whose source never held rows (nothing to delete).
    pub moved_at_unix_ns: Vec<(String, i64)>,
    /// When the plan finished: the last source delete, or `i64::MIN` when
    /// nothing had to move; `None` when some turbine never left its source.
    pub finished_unix_ns: Option<i64>,
}

pub fn check(meta: &RunMeta, final_state: &FinalState, audit: Option<&Audit>) -> Liveness {
    let mut rows: HashMap<(&str, &str), u64> = HashMap::new();
    for st in &final_state.shards {
        *rows
            .entry((st.shard.as_str(), st.turbine.as_str()))
            .or_default() += st.runs.iter().map(|r| r.rows()).sum::<u64>();
    }
    let mut source_deletes: HashMap<(&str, &str), i64> = HashMap::new();
    for w in audit.map_or(&[][..], |a| a.shard_writes.as_slice()) {
        if let (WriteOp::Delete, Some(t)) = (w.op, w.turbine.as_deref()) {
            if is_governed(w) && changed_rows(w) {
                let at = source_deletes
                    .entry((w.shard.as_str(), t))
                    .or_insert(i64::MIN);
                *at = (*at).max(w.commit_unix_ns);
            }
        }
    }
    let mut out = Liveness {
        planned: meta.plan.len() as u64,
        ..Liveness::default()
    };
    let mut finished = i64::MIN;
    for p in &meta.plan {
        if p.from == p.to {
            continue;
        }
        let left = rows
            .get(&(p.from.as_str(), p.turbine.as_str()))
            .copied()
            .unwrap_or(0);
        if left > 0 {
            out.not_moved.push(NotMoved {
                turbine: p.turbine.clone(),
                from: p.from.clone(),
                to: p.to.clone(),
                rows_on_source: left,
            });
        } else if let Some(&at) = source_deletes.get(&(p.from.as_str(), p.turbine.as_str())) {
            out.moved_at_unix_ns.push((p.turbine.clone(), at));
            finished = finished.max(at);
        }
    }
    out.finished_unix_ns = out.not_moved.is_empty().then_some(finished);
    out
}

impl Liveness {
    pub fn moved(&self) -> u64 {
        self.planned - self.not_moved.len() as u64
    }

    /// `JobNotFinished`: an error, unless the harness cut the run short
    /// (then the mover was stopped, not stuck, and it is information).
    pub fn anomalies(&self, meta: &RunMeta) -> Vec<Anomaly> {
        if self.not_moved.is_empty() {
            return Vec::new();
        }
        let severity = if meta.completed {
            Severity::Error
        } else {
            Severity::Info
        };
        let names: Vec<&str> = self.not_moved.iter().map(|n| n.turbine.as_str()).collect();
        let shown = names
            .iter()
            .take(10)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        let more = if names.len() > 10 {
            format!(" and {} more", names.len() - 10)
        } else {
            String::new()
        };
        let summary = format!(
            "{} of {} planned turbines still have rows on their source shard at the end{}: {shown}{more}",
            names.len(),
            self.planned,
            if meta.completed { "" } else { " (the run was cut short)" },
        );
        let end = meta.end_scenario_ms;
        let evidence = json!({
            "end_time": format_ms(end),
            "turbines": self.not_moved.iter().map(|n| json!({"turbine": n.turbine, "from": n.from, "to": n.to, "rows_on_source": n.rows_on_source})).collect::<Vec<_>>(),
        });
        vec![Anomaly::new(
            AnomalyClass::JobNotFinished,
            severity,
            names.len() as u64,
            Some(end),
            summary,
            evidence,
        )]
    }

    /// Moved turbines whose last source delete committed before `unix_ns`.
    pub fn moved_before(&self, unix_ns: i64) -> u64 {
        self.moved_at_unix_ns
            .iter()
            .filter(|(_, at)| *at < unix_ns)
            .count() as u64
    }

    pub fn finished_scenario_ms(&self, meta: &RunMeta) -> Option<i64> {
        self.finished_unix_ns
            .filter(|&f| f != i64::MIN)
            .map(|f| scenario_ms(&meta.clock, f))
    }
}
